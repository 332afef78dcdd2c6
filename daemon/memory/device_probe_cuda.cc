// Built with --config=cuda: asks the CUDA runtime and NCCL.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/memory/device_probe.h"

namespace shardd::memory {

core::DeviceInventory ProbeDevices() {
  core::DeviceInventory inventory;
  inventory.cuda_compiled = true;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    // cudaErrorInsufficientDriver / cudaErrorNoDevice on a machine without
    // a GPU: CPU only. Clear the sticky error so later calls start clean.
    inventory.cuda_device_count = 0;
    inventory.cuda_unavailable_reason = cudaGetErrorString(err);
    cudaGetLastError();
    return inventory;
  }
  inventory.cuda_device_count = count;
  if (count == 0) inventory.cuda_unavailable_reason = "no CUDA devices";
  return inventory;
}

RuntimeVersions ProbeRuntimeVersions() {
  RuntimeVersions v;
  cudaRuntimeGetVersion(&v.cuda_runtime);
  if (cudaDriverGetVersion(&v.cuda_driver) != cudaSuccess) v.cuda_driver = 0;
  if (ncclGetVersion(&v.nccl) != ncclSuccess) v.nccl = 0;
  return v;
}

absl::StatusOr<DeviceMemoryInfo> ProbeDeviceMemory(int device) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaError_t err = cudaSetDevice(device);
  if (err == cudaSuccess) err = cudaMemGetInfo(&free_bytes, &total_bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("cudaMemGetInfo of cuda:", device,
                                            ": ", cudaGetErrorString(err)));
  }
  return DeviceMemoryInfo{static_cast<int64_t>(free_bytes),
                          static_cast<int64_t>(total_bytes)};
}

}  // namespace shardd::memory
