#ifndef SHARDD_DAEMON_NODE_CUDA_SPIN_KERNEL_H_
#define SHARDD_DAEMON_NODE_CUDA_SPIN_KERNEL_H_

// For GPU tests: a kernel that keeps the device busy until the host says
// stop, standing in for a long NCCL collective. Lets a test tell, without
// timing anything, whether a call waited for the whole device: if it did,
// it could not return while the kernel still runs.
namespace shardd::node::cuda {

// Enqueues on `stream` (a cudaStream_t) one thread that spins until
// *flag != 0; `flag` is the device address of host-mapped memory
// (cudaHostAlloc with cudaHostAllocMapped). Returns 0 or the launch error.
int LaunchSpinUntilFlag(const volatile int* flag, void* stream);

}  // namespace shardd::node::cuda

#endif  // SHARDD_DAEMON_NODE_CUDA_SPIN_KERNEL_H_
