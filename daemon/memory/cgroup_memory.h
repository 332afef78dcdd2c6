#ifndef SHARDD_DAEMON_MEMORY_CGROUP_MEMORY_H_
#define SHARDD_DAEMON_MEMORY_CGROUP_MEMORY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

// Parsers of the kernel files that say how much memory a process may use:
// /proc/self/cgroup, /proc/self/mountinfo, the cgroup v2 (memory.max,
// memory.current, memory.stat) and v1 (memory.limit_in_bytes,
// memory.usage_in_bytes, memory.stat) interface files, and /proc/meminfo.
// Pure functions over file contents (MemoryLimitReader does the reading);
// thread-safe.
namespace shardd::memory {

// The process's cgroup paths from /proc/self/cgroup: the unified (v2)
// hierarchy's ("0::/path") and the v1 memory controller's
// ("N:...memory...:/path"), each when present.
struct ProcCgroup {
  std::optional<std::string> v2_path;
  std::optional<std::string> v1_memory_path;
};
ProcCgroup ParseProcSelfCgroup(absl::string_view content);

// A cgroup file system mount from /proc/self/mountinfo: a cgroup2 mount, or
// a v1 mount of the memory controller. `root` is the cgroup directory shown
// at `mount_point` ("/" unless a container sees only its own subtree).
struct CgroupMount {
  bool v2 = false;
  std::string root;
  std::string mount_point;
};
// Every such mount, in file order; octal escapes (\040) in paths decoded;
// malformed lines skipped.
std::vector<CgroupMount> ParseCgroupMounts(absl::string_view mountinfo);

// Where the cgroup at `cgroup_path` (as /proc/self/cgroup names it) is in
// the file system under `mount`: mount_point + the path below mount.root;
// nullopt when the mount does not show that cgroup.
std::optional<std::string> CgroupDirectory(const CgroupMount& mount,
                                           absl::string_view cgroup_path);

// Values at or above this are "no limit" (cgroup v1 writes
// PAGE_COUNTER_MAX pages, 9223372036854771712 with 4 KiB pages).
inline constexpr int64_t kUnlimitedCgroupBytes = int64_t{1} << 62;

// memory.max or memory.limit_in_bytes: the limit in bytes, or nullopt for
// "max" (v2) and v1's "unlimited" figure. INVALID_ARGUMENT quoting the
// content when it is neither.
absl::StatusOr<std::optional<int64_t>> ParseCgroupLimit(
    absl::string_view content);

// memory.current or memory.usage_in_bytes: a byte count.
absl::StatusOr<int64_t> ParseCgroupBytes(absl::string_view content);

// The value of `key` in a "key value" file (memory.stat), or nullopt.
std::optional<int64_t> ParseKeyedValue(absl::string_view content,
                                       absl::string_view key);

// MemAvailable of /proc/meminfo, in bytes ("MemAvailable: 23850944 kB").
// NOT_FOUND when the line is missing (kernels before 3.14).
absl::StatusOr<int64_t> ParseMemAvailable(absl::string_view meminfo);

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_CGROUP_MEMORY_H_
