#ifndef SHARDD_DAEMON_CORE_ADMISSION_DECISION_H_
#define SHARDD_DAEMON_CORE_ADMISSION_DECISION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "daemon/core/admission_plan.h"

namespace shardd::core {

// What a limit bounds.
enum class LimitScope {
  // Host memory: private and shared-memory bytes of a plan.
  kHost,
  // Free space of the shm directory's file system: shared-memory bytes.
  kShm,
  // GPU memory: device bytes.
  kDevice,
  // Everything a plan counts (the operator's --memory_limit_bytes).
  kTotal,
};

// "host memory", "shm space", "device memory", "planned memory".
const char* LimitScopeName(LimitScope scope);

// One source's figure of what this daemon may still use.
struct MemoryLimit {
  LimitScope scope = LimitScope::kHost;
  // Bytes still available to this daemon by this source (never negative).
  int64_t available_bytes = 0;
  // Read from the system (cgroup, /proc/meminfo, statvfs, the device):
  // the check keeps a safety margin and applies the policy's fraction.
  // False for an operator's explicit figure, which is used as it is.
  bool measured = true;
  // Where the figure came from, for messages, e.g. "cgroup v2 memory.max
  // of /sys/fs/cgroup/job (8.00 GiB, 1.20 GiB in use)".
  std::string source;
};

// The headroom a measured limit keeps. Host and device memory: what no
// plan counts (the process's code and heap, up to 256 MiB of freed heap
// glibc may keep (shardd_main's M_TRIM_THRESHOLD), gRPC messages of up to
// --max_message_mb and their copies, Gloo's and NCCL's buffers, allocation
// rounding): max(256 MiB, 1/20 of the available bytes). Shm space: only
// segments go there, sized exactly, so 1/20 of the free space (room for
// other users of the directory), without a floor that would refuse every
// model on a small /dev/shm.
inline constexpr int64_t kMinSafetyMarginBytes = int64_t{256} << 20;
int64_t SafetyMargin(LimitScope scope, int64_t available_bytes);

// What a plan may use of `limit`: measured: min(fraction * available,
// available - SafetyMargin(scope, available)), at least 0; explicit:
// available. `fraction` in (0, 1].
int64_t UsableBytes(const MemoryLimit& limit, double fraction);

// The bytes of `plan` that count against a limit of `scope`.
int64_t BytesInScope(const AdmissionPlan& plan, LimitScope scope);

// One scope's check: the plan's bytes there against the smallest usable
// figure of the limits of that scope.
struct ScopeCheck {
  LimitScope scope = LimitScope::kHost;
  int64_t needed_bytes = 0;
  int64_t usable_bytes = 0;
  // The binding limit's source and, when measured, what the margin or
  // fraction took off: "/proc/meminfo MemAvailable leaves 22.75 GiB, less a
  // safety margin of 1.14 GiB".
  std::string limited_by;
  bool fits() const { return needed_bytes <= usable_bytes; }
};

// One check per scope that has at least one limit, in LimitScope order. A
// scope without limits is unbounded (nothing could be read there).
std::vector<ScopeCheck> CheckScopes(const AdmissionPlan& plan,
                                    const std::vector<MemoryLimit>& limits,
                                    double fraction);

// Every limit, "; "-separated, in LimitScope order: "host memory 21.36 GiB
// from /proc/meminfo MemAvailable leaves 22.75 GiB, less a safety margin
// of 1.14 GiB; ...", or "none could be read".
std::string DescribeLimits(const std::vector<MemoryLimit>& limits,
                           double fraction);

// The admission decision (pure). OK when every scope fits; else
// RESOURCE_EXHAUSTED naming every scope that does not fit, the plan's
// breakdown (categories that are not empty) and every limit:
//   "<what>: the plan does not fit in memory: it needs 272.03 GiB
//   (292091330560 B) of host memory, which may use 20.89 GiB (22426125722
//   B): /proc/meminfo MemAvailable leaves 21.99 GiB, less a safety margin
//   of 1.10 GiB; it needs ... of shm space, .... Plan: parameter shards
//   64.00 GiB (shm), gradient shards 64.00 GiB, ...; host 272.03 GiB (of
//   it shm 80.00 GiB), device 0 B. Limits: host memory 20.89 GiB from ...; ..."
absl::Status DecideAdmission(absl::string_view what, const AdmissionPlan& plan,
                             const std::vector<MemoryLimit>& limits,
                             double fraction);

}  // namespace shardd::core

#endif  // SHARDD_DAEMON_CORE_ADMISSION_DECISION_H_
