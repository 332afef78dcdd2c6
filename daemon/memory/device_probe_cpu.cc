// Built without --config=cuda: no CUDA runtime is linked, so there is
// nothing to ask.
#include "absl/status/status.h"
#include "daemon/memory/device_probe.h"

namespace shardd::memory {

core::DeviceInventory ProbeDevices() {
  return core::DeviceInventory{false, 0, "built without CUDA"};
}

RuntimeVersions ProbeRuntimeVersions() { return RuntimeVersions{}; }

absl::StatusOr<DeviceMemoryInfo> ProbeDeviceMemory(int /*device*/) {
  return absl::FailedPreconditionError("built without CUDA: no device memory");
}

}  // namespace shardd::memory
