#include <cuda_runtime.h>

#include "daemon/core/cuda/half_convert.cuh"
#include "daemon/core/cuda/launch_result.cuh"
#include "daemon/node/cuda/engine_kernels.h"

namespace shardd::node::cuda {
namespace {

using core::cuda::BFloat16BitsToFloat;
using core::cuda::FloatToBFloat16Bits;
using core::cuda::FloatToHalfBits;
using core::cuda::HalfBitsToFloat;

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 65536 ? wanted : 65536);
}

__device__ __forceinline__ float Load(const void* p, ElementType type,
                                      int64_t i) {
  switch (type) {
    case ElementType::kBFloat16:
      return BFloat16BitsToFloat(static_cast<const uint16_t*>(p)[i]);
    case ElementType::kFloat16:
      return HalfBitsToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void Store(void* p, ElementType type, int64_t i,
                                      float v) {
  switch (type) {
    case ElementType::kBFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToBFloat16Bits(v);
      return;
    case ElementType::kFloat16:
      static_cast<uint16_t*>(p)[i] = FloatToHalfBits(v);
      return;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

#define SHARDD_GRID_STRIDE(i, n)                                        \
  for (int64_t i =                                                      \
           static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
       i < (n); i += static_cast<int64_t>(blockDim.x) * gridDim.x)

__global__ void Accumulate(float* __restrict__ acc,
                           const void* __restrict__ src, ElementType type,
                           int64_t n, bool first) {
  SHARDD_GRID_STRIDE(i, n) {
    const float v = Load(src, type, i);
    acc[i] = first ? v : acc[i] + v;
  }
}

__global__ void AddRounded(void* __restrict__ dst, ElementType type,
                           const float* __restrict__ add, int64_t n) {
  SHARDD_GRID_STRIDE(i, n) { Store(dst, type, i, Load(dst, type, i) + add[i]); }
}

__global__ void ToLowPrecision(const float* __restrict__ in,
                               void* __restrict__ out, ElementType type,
                               int64_t n) {
  SHARDD_GRID_STRIDE(i, n) { Store(out, type, i, in[i]); }
}

// Each block folds at most kChunk elements per pass into shared bins (each
// square < 2^48, so 2^16 of them fit 64 bits), then adds its bins to the
// global 128-bit sums: integer additions, exact in any order.
constexpr int64_t kChunk = int64_t{1} << 16;

__global__ void SquareBins(const float* __restrict__ grad, int64_t n,
                           unsigned long long* __restrict__ bins) {
  __shared__ unsigned long long local[256];
  __shared__ unsigned long long nonfinite;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  for (int64_t c = blockIdx.x; c < chunks; c += gridDim.x) {
    for (int e = threadIdx.x; e < 256; e += blockDim.x) local[e] = 0;
    if (threadIdx.x == 0) nonfinite = 0;
    __syncthreads();
    const int64_t begin = c * kChunk;
    const int64_t end = begin + kChunk < n ? begin + kChunk : n;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      const uint32_t bits = __float_as_uint(grad[i]);
      const uint32_t exponent = (bits >> 23) & 0xffu;
      const unsigned long long m =
          (bits & 0x7fffffu) | (static_cast<uint32_t>(exponent != 0) << 23);
      if (exponent == 0xffu) {
        atomicAdd(&nonfinite, 1ull);
      } else {
        atomicAdd(&local[exponent], m * m);
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < 256; e += blockDim.x) {
      const unsigned long long v = local[e];
      if (v == 0) continue;
      const unsigned long long before = atomicAdd(&bins[e], v);
      if (before + v < before) atomicAdd(&bins[256 + e], 1ull);  // Carry.
    }
    if (threadIdx.x == 0 && nonfinite != 0) atomicAdd(&bins[512], nonfinite);
    __syncthreads();
  }
}

// Sgd::Update's body (daemon/core/sgd.cc) with the variant as uniform
// branches.
__global__ void Sgd(core::SgdScalars s, core::SgdVariant variant,
                    const float* __restrict__ grad, float* __restrict__ param,
                    float* __restrict__ buffer, int64_t n) {
  SHARDD_GRID_STRIDE(i, n) {
    float g = grad[i] * s.grad_scale;
    if (variant.weight_decay) g = g + s.weight_decay * param[i];
    if (variant.mode != core::SgdMomentumMode::kNone) {
      const float b = variant.mode == core::SgdMomentumMode::kFirstStep
                          ? g
                          : s.momentum * buffer[i] + s.one_minus_dampening * g;
      buffer[i] = b;
      g = variant.nesterov ? g + s.momentum * b : b;
    }
    param[i] = param[i] - s.lr * g;
  }
}

#undef SHARDD_GRID_STRIDE

}  // namespace

int LaunchAccumulate(float* acc, const void* src, ElementType type, int64_t n,
                     bool first, void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  Accumulate<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      acc, src, type, n, first);
  return core::cuda::LaunchResult();
}

int LaunchAddRounded(void* dst, ElementType type, const float* add, int64_t n,
                     void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  AddRounded<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      dst, type, add, n);
  return core::cuda::LaunchResult();
}

int LaunchToLowPrecision(const float* in, void* out, ElementType type,
                         int64_t n, void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  ToLowPrecision<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, out, type, n);
  return core::cuda::LaunchResult();
}

int LaunchSquareBins(const float* grad, int64_t n, unsigned long long* bins,
                     void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  const int blocks = static_cast<int>(chunks < 1024 ? chunks : 1024);
  SquareBins<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      grad, n, bins);
  return core::cuda::LaunchResult();
}

int LaunchSgd(const core::SgdScalars& scalars, const core::SgdVariant& variant,
              const float* grad, float* param, float* momentum, int64_t n,
              void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  Sgd<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      scalars, variant, grad, param, momentum, n);
  return core::cuda::LaunchResult();
}

int PreloadEngineKernels() {
  cudaFuncAttributes attributes;
  for (const void* kernel : {reinterpret_cast<const void*>(&Accumulate),
                             reinterpret_cast<const void*>(&AddRounded),
                             reinterpret_cast<const void*>(&ToLowPrecision),
                             reinterpret_cast<const void*>(&SquareBins),
                             reinterpret_cast<const void*>(&Sgd)}) {
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel);
        e != cudaSuccess) {
      return static_cast<int>(e);
    }
  }
  return 0;
}

}  // namespace shardd::node::cuda
