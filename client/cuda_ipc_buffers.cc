#include "client/cuda_ipc_buffers.h"

#include <cuda_runtime_api.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardd::client {
namespace {

absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

// The device `ref` names in this process: by PCI bus id when the daemon
// sent one (this process may number the GPUs differently), else by the
// daemon's ordinal.
absl::StatusOr<int> DeviceOf(const v1::CudaIpcRef& ref) {
  if (ref.pci_bus_id().empty()) return ref.device_ordinal();
  int device = -1;
  if (absl::Status s =
          CudaStatus(cudaDeviceGetByPCIBusId(&device, ref.pci_bus_id().c_str()),
                     absl::StrCat("no GPU with PCI bus id ", ref.pci_bus_id(),
                                  " is visible to this trainer"));
      !s.ok()) {
    return s;
  }
  return device;
}

absl::Status MakeCurrent(const v1::CudaIpcRef& ref) {
  absl::StatusOr<int> device = DeviceOf(ref);
  if (!device.ok()) return device.status();
  return CudaStatus(cudaSetDevice(*device), "cudaSetDevice");
}

}  // namespace

CudaIpcBuffers::~CudaIpcBuffers() { CloseAll().IgnoreError(); }

absl::Status CudaIpcBuffers::CloseAll() {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status first;
  for (auto& [handle, opened] : opened_) {
    // cudaIpcCloseMemHandle acts on the current device's context: on a
    // node where the trainer uses several GPUs, the calling thread's device
    // need not be the buffer's.
    absl::Status s = CudaStatus(cudaSetDevice(opened.device),
                                "cudaSetDevice before cudaIpcCloseMemHandle");
    if (s.ok()) {
      s = CudaStatus(cudaIpcCloseMemHandle(opened.base),
                     "cudaIpcCloseMemHandle");
    }
    if (first.ok() && !s.ok()) first = s;
  }
  opened_.clear();
  return first;
}

absl::StatusOr<uint8_t*> CudaIpcBuffers::Open(const v1::CudaIpcRef& ref) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = opened_.find(ref.mem_handle());
  if (it == opened_.end()) {
    absl::StatusOr<int> device = DeviceOf(ref);
    if (!device.ok()) return device.status();
    if (absl::Status s = CudaStatus(cudaSetDevice(*device), "cudaSetDevice");
        !s.ok()) {
      return s;
    }
    cudaIpcMemHandle_t handle;
    std::memcpy(handle.reserved, ref.mem_handle().data(),
                sizeof(handle.reserved));
    void* base = nullptr;
    if (absl::Status s = CudaStatus(
            cudaIpcOpenMemHandle(&base, handle, cudaIpcMemLazyEnablePeerAccess),
            "cudaIpcOpenMemHandle");
        !s.ok()) {
      return s;
    }
    it = opened_
             .emplace(ref.mem_handle(),
                      Opened{static_cast<uint8_t*>(base), *device})
             .first;
  }
  return it->second.base + ref.byte_offset();
}

absl::Status CudaIpcBuffers::Download(const v1::CudaIpcRef& ref, void* host) {
  absl::StatusOr<uint8_t*> p = Open(ref);
  if (!p.ok()) return p.status();
  // The calling thread may not be the one that opened the handle: make the
  // buffer's device current (a node with one GPU per trainer).
  if (absl::Status s = MakeCurrent(ref); !s.ok()) return s;
  return CudaStatus(cudaMemcpy(host, *p, static_cast<size_t>(ref.byte_length()),
                               cudaMemcpyDeviceToHost),
                    "download of a CUDA IPC buffer");
}

absl::Status CudaIpcBuffers::Upload(const v1::CudaIpcRef& ref,
                                    const void* host) {
  absl::StatusOr<uint8_t*> p = Open(ref);
  if (!p.ok()) return p.status();
  // As in Download; the wait below is for the current device, too.
  if (absl::Status s = MakeCurrent(ref); !s.ok()) return s;
  if (absl::Status s = CudaStatus(
          cudaMemcpy(*p, host, static_cast<size_t>(ref.byte_length()),
                     cudaMemcpyHostToDevice),
          "upload to a CUDA IPC buffer");
      !s.ok()) {
    return s;
  }
  // From pageable memory cudaMemcpy may return once the bytes are staged,
  // before they reach the device; the daemon reads them next, from another
  // process and on its own stream. Only a device-wide wait covers that.
  return CudaStatus(cudaDeviceSynchronize(), "upload to a CUDA IPC buffer");
}

absl::Status CudaIpcBuffers::Synchronize(const v1::CudaIpcRef& ref) {
  absl::StatusOr<uint8_t*> p = Open(ref);
  if (!p.ok()) return p.status();
  if (absl::Status s = MakeCurrent(ref); !s.ok()) return s;
  return CudaStatus(cudaDeviceSynchronize(),
                    "waiting for the trainer's writes to a CUDA IPC buffer");
}

}  // namespace shardd::client
