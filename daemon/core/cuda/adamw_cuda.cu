#include <cuda_runtime.h>

#include "daemon/core/cuda/adamw_cuda.h"
#include "daemon/core/cuda/launch_result.cuh"

namespace shardd::core::cuda {
namespace {

// One thread per element, grid-stride. The expression order matches
// AdamWBody in daemon/core/adamw.cc term for term; nvcc runs with
// --fmad=false so no multiply-add is fused.
__global__ void AdamWKernel(AdamWScalars s, const float* __restrict__ grad,
                            float* __restrict__ param,
                            float* __restrict__ exp_avg,
                            float* __restrict__ exp_avg_sq, int64_t n) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    const float g = grad[i] * s.grad_scale;
    const float m = s.beta1 * exp_avg[i] + s.one_minus_beta1 * g;
    const float v = s.beta2 * exp_avg_sq[i] + s.one_minus_beta2 * (g * g);
    const float denom = sqrtf(v) / s.sqrt_bc2 + s.eps;
    param[i] = param[i] * s.decay - s.step_size * (m / denom);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
  }
}

}  // namespace

int LaunchAdamW(const AdamWScalars& scalars, const float* grad, float* param,
                float* exp_avg, float* exp_avg_sq, int64_t n, void* stream) {
  if (n <= 0) return 0;
  ClearStaleError();
  constexpr int kThreads = 256;
  const int64_t wanted = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(wanted < 65536 ? wanted : 65536);
  AdamWKernel<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      scalars, grad, param, exp_avg, exp_avg_sq, n);
  return LaunchResult();
}

int PreloadAdamWKernels() {
  cudaFuncAttributes attributes;
  return static_cast<int>(cudaFuncGetAttributes(
      &attributes, reinterpret_cast<const void*>(&AdamWKernel)));
}

}  // namespace shardd::core::cuda
