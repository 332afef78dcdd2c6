#ifndef SHARDD_DAEMON_MEMORY_MEMORY_LIMIT_READER_H_
#define SHARDD_DAEMON_MEMORY_MEMORY_LIMIT_READER_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/admission_decision.h"
#include "daemon/memory/device_probe.h"

namespace shardd::memory {

struct MemoryLimitOptions {
  // Prefix of /proc and of the cgroup file systems' paths ("": the real
  // ones); tests point it at a fixture tree.
  std::string root;
  // The directory whose file system's free space bounds shared-memory
  // segments (read as given, without `root`); empty: not read.
  std::string shm_dir;
  // The operator's bound on everything a plan counts (--memory_limit_bytes);
  // 0: none.
  int64_t explicit_limit_bytes = 0;
  // The device's free memory (ProbeDeviceMemory of the daemon's GPU), and
  // its name for messages; null: no device.
  std::function<absl::StatusOr<DeviceMemoryInfo>()> device_memory;
  std::string device_name;
};

// What one Read found.
struct LimitReading {
  std::vector<core::MemoryLimit> limits;
  // Sources that exist but could not be read, with the reason (for the
  // daemon's log). A cgroup without a limit is not listed: it bounds
  // nothing.
  std::vector<std::string> unreadable;
};

// Reads what this process may still allocate, from every source admission
// knows (each a core::MemoryLimit, available = what is left now):
//  * the memory cgroup of this process and each of its ancestors, v2
//    (memory.max - memory.current) and v1 (memory.limit_in_bytes -
//    memory.usage_in_bytes), "in use" not counting the inactive file cache
//    the kernel reclaims first (memory.stat inactive_file, v1
//    total_inactive_file), as kubelet's working set does; the smallest
//    headroom of the hierarchy;
//  * /proc/meminfo MemAvailable;
//  * the free space (statvfs f_bavail) of shm_dir's file system (kShm);
//  * the device's free memory (kDevice), when a probe is given;
//  * explicit_limit_bytes (kTotal, not measured: no margin).
//
// Thread-safe (reads files on every call, keeps no state). Owns its
// options; the device probe must be callable from any thread.
class MemoryLimitReader {
 public:
  explicit MemoryLimitReader(MemoryLimitOptions options);

  LimitReading Read() const;

  const MemoryLimitOptions& options() const { return options_; }

 private:
  void ReadCgroups(LimitReading* out) const;
  void ReadMemAvailable(LimitReading* out) const;
  void ReadShmSpace(LimitReading* out) const;
  void ReadDevice(LimitReading* out) const;

  const MemoryLimitOptions options_;
};

// The whole content of `path`; errno as a Status naming the path.
absl::StatusOr<std::string> ReadSmallFile(const std::string& path);

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_MEMORY_LIMIT_READER_H_
