#ifndef SHARDD_DAEMON_CORE_CUDA_LAUNCH_RESULT_CUH_
#define SHARDD_DAEMON_CORE_CUDA_LAUNCH_RESULT_CUH_

#include <cuda_runtime.h>

namespace shardd::core::cuda {

// Call right before a kernel launch: cudaGetLastError would otherwise hand
// the launch's check an earlier, unrelated error of this thread (a failed
// cudaSetDevice or a query of another call that its caller already saw and
// handled), and a healthy launch would be blamed for it. Sticky errors (a
// kernel that faulted) are not cleared by this and still surface.
inline void ClearStaleError() { (void)cudaGetLastError(); }

// The result of the kernel launch just made on this thread, as an int
// (cudaSuccess = 0), for the launchers' C-style interfaces.
//
// cudaGetLastError returns (and clears) the last error of ANY runtime call
// on this thread, and an event or stream query that found work still
// running leaves cudaErrorNotReady there (PyTorch's allocator met the same:
// pytorch/pytorch#18584). That is not an error and says nothing about the
// launch, which never fails with it; counting it would fail a healthy
// operation after every poll that came too early.
inline int LaunchResult() {
  const cudaError_t e = cudaGetLastError();
  return e == cudaErrorNotReady ? 0 : static_cast<int>(e);
}

}  // namespace shardd::core::cuda

#endif  // SHARDD_DAEMON_CORE_CUDA_LAUNCH_RESULT_CUH_
