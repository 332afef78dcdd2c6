// Built without --config=cuda: no CUDA runtime is linked, so there is
// nothing to ask.
#include "daemon/memory/device_probe.h"

namespace shardd::memory {

core::DeviceInventory ProbeDevices() {
  return core::DeviceInventory{false, 0, "built without CUDA"};
}

RuntimeVersions ProbeRuntimeVersions() { return RuntimeVersions{}; }

}  // namespace shardd::memory
