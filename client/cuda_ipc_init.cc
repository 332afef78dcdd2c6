#include "client/cuda_ipc_init.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "daemon/core/cuda/cuda_context_api.h"
#include "daemon/core/scoped_cuda_device.h"

namespace shardd::client {
namespace {

absl::Status CudaStatus(cudaError_t e, absl::string_view what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (",
                                          cudaGetErrorString(e), ")"));
}

using GetAddressRangeFn = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// cuMemGetAddressRange through the runtime, so nothing links libcuda.
GetAddressRangeFn AddressRange() {
  static const GetAddressRangeFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000,
                                         cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      return static_cast<GetAddressRangeFn>(nullptr);
    }
    return reinterpret_cast<GetAddressRangeFn>(p);
  }();
  return fn;
}

}  // namespace

absl::StatusOr<v1::TensorInit> CudaIpcInit::Export(const void* base,
                                                   int64_t byte_offset,
                                                   int64_t byte_length) {
  if (base == nullptr) {
    return absl::InvalidArgumentError("base: null");
  }
  if (byte_offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_offset: must be >= 0, got ", byte_offset));
  }
  if (byte_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_length: must be >= 0, got ", byte_length));
  }
  cudaPointerAttributes attributes;
  if (absl::Status s = CudaStatus(cudaPointerGetAttributes(&attributes, base),
                                  "base: cudaPointerGetAttributes");
      !s.ok()) {
    return s;
  }
  if (attributes.type != cudaMemoryTypeDevice) {
    return absl::InvalidArgumentError(
        "base: not device memory from cudaMalloc");
  }
  const int device = attributes.device;
  absl::StatusOr<core::ScopedCudaDevice> bound =
      core::ScopedCudaDevice::Bind(device, core::cuda::RealCudaContextApi());
  if (!bound.ok()) return bound.status();
  GetAddressRangeFn range = AddressRange();
  if (range == nullptr) {
    return absl::InternalError(
        "cuMemGetAddressRange is not available in this driver");
  }
  CUdeviceptr start = 0;
  size_t size = 0;
  if (const CUresult r =
          range(&start, &size, reinterpret_cast<CUdeviceptr>(base));
      r != CUDA_SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(
        "base: not in a cudaMalloc allocation (cuMemGetAddressRange: ",
        static_cast<int>(r), ")"));
  }
  if (start != reinterpret_cast<CUdeviceptr>(base)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "base: ", reinterpret_cast<CUdeviceptr>(base) - start,
        " bytes into a cudaMalloc allocation; pass the allocation's start "
        "and the offset as byte_offset"));
  }
  const int64_t allocation_bytes = static_cast<int64_t>(size);
  if (byte_length > allocation_bytes ||
      byte_offset > allocation_bytes - byte_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "byte_offset: range [", byte_offset, ", +", byte_length,
        ") outside the allocation of ", allocation_bytes, " bytes"));
  }
  cudaIpcMemHandle_t handle;
  if (absl::Status s =
          CudaStatus(cudaIpcGetMemHandle(&handle, const_cast<void*>(base)),
                     "cudaIpcGetMemHandle");
      !s.ok()) {
    return s;
  }
  char bus_id[32] = {};
  if (absl::Status s =
          CudaStatus(cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device),
                     "cudaDeviceGetPCIBusId");
      !s.ok()) {
    return s;
  }
  v1::TensorInit init;
  v1::CudaIpcRef* ref = init.mutable_cuda_ipc();
  ref->set_mem_handle(std::string(handle.reserved, sizeof(handle.reserved)));
  ref->set_device_ordinal(device);
  ref->set_pci_bus_id(bus_id);
  ref->set_allocation_bytes(allocation_bytes);
  ref->set_byte_offset(byte_offset);
  ref->set_byte_length(byte_length);
  return init;
}

}  // namespace shardd::client
