#include "daemon/node/cuda/cuda_ipc_init_reader.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"
#include "daemon/core/cuda/cuda_context_api.h"
#include "daemon/core/scoped_cuda_device.h"

namespace shardd::node {
namespace {

std::string CudaError(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

// The trainer's GPU in this process's numbering.
absl::StatusOr<int> DeviceOf(const core::CudaIpcSource& source,
                             absl::string_view field) {
  if (source.pci_bus_id.empty()) return source.device_ordinal;
  int device = -1;
  const cudaError_t e =
      cudaDeviceGetByPCIBusId(&device, source.pci_bus_id.c_str());
  if (e != cudaSuccess) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ".pci_bus_id: no GPU with PCI bus id ", source.pci_bus_id,
        " is visible to this daemon: ", CudaError(e)));
  }
  return device;
}

absl::Status CopyToHost(void* host, const char* device, int64_t bytes,
                        absl::string_view field) {
  const cudaError_t e = cudaMemcpy(host, device, static_cast<size_t>(bytes),
                                   cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat(field, ": copying ", bytes,
                                            " bytes to host: ", CudaError(e)));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CudaIpcInitReader::WithMapping(
    const core::CudaIpcSource& source, absl::string_view field,
    const std::function<absl::Status(const char* range)>& use) {
  if (static_cast<int64_t>(source.mem_handle.size()) !=
      static_cast<int64_t>(sizeof(cudaIpcMemHandle_t))) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".mem_handle: ", source.mem_handle.size(),
                     " bytes, expected ", sizeof(cudaIpcMemHandle_t)));
  }
  absl::StatusOr<int> device = DeviceOf(source, field);
  if (!device.ok()) return device.status();
  absl::StatusOr<core::ScopedCudaDevice> bound =
      core::ScopedCudaDevice::Bind(*device, core::cuda::RealCudaContextApi());
  if (!bound.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(field, ": cannot use the trainer's GPU ", *device, ": ",
                     bound.status().message()));
  }
  cudaIpcMemHandle_t handle;
  std::memcpy(&handle, source.mem_handle.data(), sizeof(handle));
  void* base = nullptr;
  const cudaError_t opened =
      cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess);
  if (opened != cudaSuccess) {
    return absl::FailedPreconditionError(
        absl::StrCat(field,
                     ".mem_handle: cannot open the trainer's buffer (freed, "
                     "or not a cudaMalloc base?): ",
                     CudaError(opened)));
  }
  // Closed with the buffer's device still current (declared after `bound`,
  // so it runs first).
  absl::Cleanup close = [base] { (void)cudaIpcCloseMemHandle(base); };
  return use(static_cast<const char*>(base) + source.byte_offset);
}

absl::StatusOr<uint32_t> CudaIpcInitReader::Checksum(
    const core::CudaIpcSource& source, absl::string_view field) {
  uint32_t crc = 0;
  absl::Status status =
      WithMapping(source, field, [&](const char* range) -> absl::Status {
        const int64_t window = std::min(kWindowBytes, source.byte_length);
        std::unique_ptr<char[]> staging(new char[std::max<int64_t>(window, 1)]);
        for (int64_t at = 0; at < source.byte_length; at += window) {
          const int64_t length = std::min(window, source.byte_length - at);
          if (absl::Status s =
                  CopyToHost(staging.get(), range + at, length, field);
              !s.ok()) {
            return s;
          }
          crc = core::Crc32cExtend(crc, staging.get(),
                                   static_cast<size_t>(length));
        }
        return absl::OkStatus();
      });
  if (!status.ok()) return status;
  return crc;
}

absl::Status CudaIpcInitReader::Read(const core::CudaIpcSource& source,
                                     core::DType dtype, int64_t first_element,
                                     int64_t n, float* out,
                                     absl::string_view field) {
  if (absl::Status s = CheckElements(source, dtype, first_element, n, field);
      !s.ok()) {
    return s;
  }
  if (n == 0) return absl::OkStatus();
  const int64_t size = core::DTypeSize(dtype);
  return WithMapping(source, field, [&](const char* range) -> absl::Status {
    const char* first = range + first_element * size;
    if (dtype == core::DType::kFloat32) {
      // Already the master copy's encoding: no staging.
      return CopyToHost(out, first, n * size, field);
    }
    // Windows hold whole elements.
    const int64_t window_elements = std::min(kWindowBytes / size, n);
    std::unique_ptr<char[]> staging(new char[window_elements * size]);
    for (int64_t done = 0; done < n; done += window_elements) {
      const int64_t count = std::min(window_elements, n - done);
      if (absl::Status s = CopyToHost(staging.get(), first + done * size,
                                      count * size, field);
          !s.ok()) {
        return s;
      }
      Widen(staging.get(), dtype, count, out + done);
    }
    return absl::OkStatus();
  });
}

}  // namespace shardd::node
