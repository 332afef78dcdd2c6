#include <cuda_runtime.h>

#include "tools/gpu/preflight_kernel.h"

namespace shardd::tools {
namespace {

__global__ void FillPattern(uint32_t* out, int64_t n, uint32_t seed) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    out[i] =
        static_cast<uint32_t>(static_cast<uint64_t>(i) * 2654435761u) ^ seed;
  }
}

}  // namespace

int LaunchFillPattern(uint32_t* out, int64_t n, uint32_t seed, void* stream) {
  if (n <= 0) return 0;
  // An earlier runtime call's error must not be taken for this launch's.
  (void)cudaGetLastError();
  FillPattern<<<1024, 256, 0, static_cast<cudaStream_t>(stream)>>>(out, n,
                                                                   seed);
  const cudaError_t e = cudaGetLastError();
  return e == cudaErrorNotReady ? 0 : static_cast<int>(e);
}

}  // namespace shardd::tools
