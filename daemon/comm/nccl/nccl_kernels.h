#ifndef SHARDD_DAEMON_COMM_NCCL_NCCL_KERNELS_H_
#define SHARDD_DAEMON_COMM_NCCL_NCCL_KERNELS_H_

#include <cstdint>

// The CUDA kernels the NCCL backend runs around its reductions, so that
// bf16/fp16 reductions accumulate in fp32 and round once, averages are
// "sum, then divide by the group size" in fp32, and fixed-order reductions
// add one block at a time (see nccl_plan.h).
//
// Conversions round like the CPU twins in daemon/core/dtype.h: fp32 -> bf16
// with round-to-nearest-even (NaN stays a quiet NaN with its payload, as
// core::FloatToBFloat16), fp32 -> fp16 round-to-nearest-even with NaN
// keeping its sign and top payload bits (as core::FloatToHalf). Division
// is IEEE (the nvcc flags in bazel/cuda.bzl).
//
// Pointers are device pointers; `stream` is a cudaStream_t. Each function
// enqueues one kernel (nothing for n == 0) and returns 0, or the
// cudaError_t of the launch. Stateless and thread-safe.
namespace shardd::comm::nccl::cuda {

enum class HalfType : int {
  kBFloat16 = 0,
  kFloat16 = 1,
};

int LaunchUpcast(const void* src, HalfType type, float* dst, int64_t n,
                 void* stream);
int LaunchDowncast(const float* src, void* dst, HalfType type, int64_t n,
                   void* stream);
// data[i] = data[i] / divisor.
int LaunchDivide(float* data, int divisor, int64_t n, void* stream);
// acc[i] = acc[i] + add[i], one IEEE fp32 addition (no fused operations),
// for the fixed-order reductions.
int LaunchAdd(float* acc, const float* add, int64_t n, void* stream);

// Loads this file's kernels now (cudaFuncGetAttributes of each), with the
// device current. Under lazy loading (the default since CUDA 12.2) a
// kernel's first launch loads its module, which waits for the whole device
// and so for any NCCL kernel running then: call it when the backend is
// built. Returns 0 or the first cudaError_t.
int PreloadKernels();

}  // namespace shardd::comm::nccl::cuda

#endif  // SHARDD_DAEMON_COMM_NCCL_NCCL_KERNELS_H_
