#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "daemon/comm/nccl/nccl_kernels.h"
#include "daemon/core/cuda/half_convert.cuh"
#include "daemon/core/cuda/launch_result.cuh"

namespace shardd::comm::nccl::cuda {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<int>(wanted < 65536 ? wanted : 65536);
}

using core::cuda::FloatToBFloat16Bits;
using core::cuda::FloatToHalfBits;

__global__ void UpcastBf16(const uint16_t* __restrict__ src,
                           float* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = __uint_as_float(static_cast<uint32_t>(src[i]) << 16);
  }
}

// Through HalfBitsToFloat, not __half2float: NaNs keep the host's bits.
__global__ void UpcastFp16(const uint16_t* __restrict__ src,
                           float* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = core::cuda::HalfBitsToFloat(src[i]);
  }
}

__global__ void DowncastBf16(const float* __restrict__ src,
                             uint16_t* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = FloatToBFloat16Bits(src[i]);
  }
}

// Through FloatToHalfBits, not __float2half_rn: the hardware returns one
// canonical NaN, the CPU keeps sign and payload (core::FloatToHalf).
__global__ void DowncastFp16(const float* __restrict__ src,
                             uint16_t* __restrict__ dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    dst[i] = FloatToHalfBits(src[i]);
  }
}

__global__ void Divide(float* __restrict__ data, float divisor, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    data[i] = data[i] / divisor;
  }
}

__global__ void Add(float* __restrict__ acc, const float* __restrict__ add,
                    int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    acc[i] = acc[i] + add[i];
  }
}

}  // namespace

int LaunchUpcast(const void* src, HalfType type, float* dst, int64_t n,
                 void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    UpcastBf16<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(src),
                                              dst, n);
  } else {
    UpcastFp16<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint16_t*>(src),
                                              dst, n);
  }
  return core::cuda::LaunchResult();
}

int LaunchDowncast(const float* src, void* dst, HalfType type, int64_t n,
                   void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  if (type == HalfType::kBFloat16) {
    DowncastBf16<<<Blocks(n), kThreads, 0, s>>>(src,
                                                static_cast<uint16_t*>(dst), n);
  } else {
    DowncastFp16<<<Blocks(n), kThreads, 0, s>>>(src,
                                                static_cast<uint16_t*>(dst), n);
  }
  return core::cuda::LaunchResult();
}

int LaunchDivide(float* data, int divisor, int64_t n, void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  Divide<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      data, static_cast<float>(divisor), n);
  return core::cuda::LaunchResult();
}

int LaunchAdd(float* acc, const float* add, int64_t n, void* stream) {
  if (n <= 0) return 0;
  core::cuda::ClearStaleError();
  Add<<<Blocks(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(acc, add,
                                                                     n);
  return core::cuda::LaunchResult();
}

int PreloadKernels() {
  cudaFuncAttributes attributes;
  for (const void* kernel : {reinterpret_cast<const void*>(&UpcastBf16),
                             reinterpret_cast<const void*>(&UpcastFp16),
                             reinterpret_cast<const void*>(&DowncastBf16),
                             reinterpret_cast<const void*>(&DowncastFp16),
                             reinterpret_cast<const void*>(&Divide),
                             reinterpret_cast<const void*>(&Add)}) {
    if (cudaError_t e = cudaFuncGetAttributes(&attributes, kernel);
        e != cudaSuccess) {
      return static_cast<int>(e);
    }
  }
  return 0;
}

}  // namespace shardd::comm::nccl::cuda
