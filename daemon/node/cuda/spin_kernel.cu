#include <cuda_runtime.h>

#include "daemon/core/cuda/launch_result.cuh"
#include "daemon/node/cuda/spin_kernel.h"

namespace shardd::node::cuda {
namespace {

__global__ void SpinUntilFlag(const volatile int* flag) {
  while (*flag == 0) {
    __nanosleep(1000);
  }
}

}  // namespace

int LaunchSpinUntilFlag(const volatile int* flag, void* stream) {
  core::cuda::ClearStaleError();
  SpinUntilFlag<<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(flag);
  return core::cuda::LaunchResult();
}

}  // namespace shardd::node::cuda
