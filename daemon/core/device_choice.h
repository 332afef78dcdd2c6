#ifndef SHARDD_DAEMON_CORE_DEVICE_CHOICE_H_
#define SHARDD_DAEMON_CORE_DEVICE_CHOICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::core {

// What the machine offers, as probed by daemon/memory (no I/O here).
struct DeviceInventory {
  // The binary was built with --config=cuda.
  bool cuda_compiled = false;
  // Usable CUDA devices; 0 when the driver is missing or too old, which
  // is "CPU only", not an error.
  int64_t cuda_device_count = 0;
  // Why there is no usable device, e.g. "CUDA driver version is
  // insufficient for CUDA runtime version"; empty when devices exist.
  std::string cuda_unavailable_reason;
};

// What the consumer of the choice can run on, beside what the machine
// offers: a daemon whose GPU data plane is missing cannot use a GPU that
// exists.
struct DeviceSupport {
  bool cuda = true;
  // Why not, when !cuda (named in the reason and in errors).
  std::string cuda_missing_reason;
};

enum class DeviceKind { kCpu, kCuda };

struct DeviceChoice {
  DeviceKind kind = DeviceKind::kCpu;
  int64_t cuda_index = -1;  // For kCuda.
  // Why this device, for the daemon's log and status ("auto: no usable CUDA
  // device (…); using CPU").
  std::string reason;
};

// Resolves the daemon's --device flag: "cpu", "cuda:N" (N >= 0) or "auto"
// (CUDA device 0 when one is usable and `support.cuda`, else CPU, with the
// reason). Errors: INVALID_ARGUMENT for malformed text; FAILED_PRECONDITION
// when CUDA is asked for explicitly but is not compiled in, the device does
// not exist or the consumer cannot use it — a user who asks for a GPU must
// not silently get a CPU.
absl::StatusOr<DeviceChoice> ResolveDevice(absl::string_view requested,
                                           const DeviceInventory& inventory,
                                           const DeviceSupport& support = {});

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_DEVICE_CHOICE_H_
