#ifndef SHARDD_DAEMON_NODE_CUDA_ENGINE_KERNELS_H_
#define SHARDD_DAEMON_NODE_CUDA_ENGINE_KERNELS_H_

#include <cstdint>

#include "daemon/core/sgd_scalars.h"

// The CUDA kernels of the step engine's math on GPU-resident shards
// (CudaEngineMath). Each is the twin of a host function and rounds the same
// way (nvcc flags in bazel/cuda.bzl: no FMA contraction, IEEE division and
// square root).
//
// Pointers are device pointers; `stream` is a cudaStream_t. Each function
// enqueues its kernel (nothing for n == 0) and returns 0, or the
// cudaError_t of the launch. Stateless and thread-safe.
namespace shardd::node::cuda {

// Element types, as core::DType's values (fp32 0, bf16 1, fp16 2).
enum class ElementType : int { kFloat32 = 0, kBFloat16 = 1, kFloat16 = 2 };

// acc[i] = float(src[i]) when `first`, else acc[i] += float(src[i]).
int LaunchAccumulate(float* acc, const void* src, ElementType type, int64_t n,
                     bool first, void* stream);
// dst[i] = type(float(dst[i]) + add[i]).
int LaunchAddRounded(void* dst, ElementType type, const float* add, int64_t n,
                     void* stream);

// Loads this file's kernels now (cudaFuncGetAttributes of each), with the
// device current. Under lazy loading (the default since CUDA 12.2) a
// kernel's first launch loads its module, which waits for the whole device
// and so for any NCCL kernel running then: call it when the backend is
// built. Returns 0 or the first cudaError_t.
int PreloadEngineKernels();
// out[i] = type(in[i]) for bf16/fp16.
int LaunchToLowPrecision(const float* in, void* out, ElementType type,
                         int64_t n, void* stream);
// bins[0, 256): low words, bins[256, 512): high words of the exact
// per-exponent sums of the squared significands, bins[512]: the count of
// NaN/infinite elements (core::SquareBins' layout of lo, hi, nonfinite),
// added to what `bins` holds (zero it first).
int LaunchSquareBins(const float* grad, int64_t n, unsigned long long* bins,
                     void* stream);
constexpr int kSquareBinWords = 2 * 256 + 1;
// Sgd::Update's sequence for `variant` (core::Sgd::ScalarsFor/VariantFor);
// momentum may be null for SgdMomentumMode::kNone.
int LaunchSgd(const core::SgdScalars& scalars, const core::SgdVariant& variant,
              const float* grad, float* param, float* momentum, int64_t n,
              void* stream);

}  // namespace shardd::node::cuda

#endif  // SHARDD_DAEMON_NODE_CUDA_ENGINE_KERNELS_H_
