#include "daemon/core/scoped_cuda_device.h"

#include "absl/strings/str_cat.h"

namespace shardd::core {

absl::StatusOr<ScopedCudaDevice> ScopedCudaDevice::Bind(
    int device, const CudaContextApi& api) {
  if (api.get_current == nullptr || api.set_current == nullptr ||
      api.set_device == nullptr) {
    return absl::FailedPreconditionError(
        "CUDA context api is incomplete (a CPU build has none)");
  }
  if (device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda device must be >= 0, got ", device));
  }
  void* previous = nullptr;
  if (int e = api.get_current(&previous); e != 0) {
    return absl::InternalError(absl::StrCat("cuCtxGetCurrent: error ", e));
  }
  if (int e = api.set_device(device); e != 0) {
    // cudaSetDevice binds nothing when it fails; put back what was there in
    // case a partial attempt did.
    api.set_current(previous);
    return absl::InternalError(
        absl::StrCat("cudaSetDevice(", device, "): error ", e));
  }
  return ScopedCudaDevice(api, previous);
}

ScopedCudaDevice::ScopedCudaDevice(ScopedCudaDevice&& other) noexcept
    : api_(other.api_), previous_(other.previous_), active_(other.active_) {
  other.active_ = false;
}

ScopedCudaDevice::~ScopedCudaDevice() { Restore().IgnoreError(); }

absl::Status ScopedCudaDevice::Restore() {
  if (!active_) return absl::OkStatus();
  active_ = false;
  if (int e = api_.set_current(previous_); e != 0) {
    return absl::InternalError(absl::StrCat("cuCtxSetCurrent: error ", e));
  }
  return absl::OkStatus();
}

}  // namespace shardd::core
