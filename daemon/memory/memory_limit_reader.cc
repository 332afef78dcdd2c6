#include "daemon/memory/memory_limit_reader.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/admission_plan.h"
#include "daemon/core/checked_math.h"
#include "daemon/memory/cgroup_memory.h"

namespace shardd::memory {
namespace {

// Kernel interface files are small; anything longer is not one of them.
constexpr size_t kMaxFileBytes = size_t{1} << 20;

absl::Status ErrnoStatus(int error, absl::string_view what,
                         const std::string& path) {
  return absl::ErrnoToStatus(error, absl::StrCat(what, " ", path));
}

// One level of a cgroup hierarchy's memory interface.
struct CgroupFiles {
  const char* version;  // "v2" or "v1".
  const char* limit;
  const char* usage;
  const char* inactive_file_key;
  const char* fallback_inactive_file_key;
};
constexpr CgroupFiles kV2 = {"v2", "memory.max", "memory.current",
                             "inactive_file", "inactive_file"};
constexpr CgroupFiles kV1 = {"v1", "memory.limit_in_bytes",
                             "memory.usage_in_bytes", "total_inactive_file",
                             "inactive_file"};

std::string Parent(const std::string& dir) {
  const size_t slash = dir.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return dir.substr(0, slash);
}

}  // namespace

absl::StatusOr<std::string> ReadSmallFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "cannot open", path);
  absl::Cleanup closer = [fd] { close(fd); };
  std::string out;
  char buffer[4096];
  while (out.size() < kMaxFileBytes) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "cannot read", path);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

MemoryLimitReader::MemoryLimitReader(MemoryLimitOptions options)
    : options_(std::move(options)) {}

LimitReading MemoryLimitReader::Read() const {
  LimitReading out;
  ReadCgroups(&out);
  ReadMemAvailable(&out);
  ReadShmSpace(&out);
  ReadDevice(&out);
  if (options_.explicit_limit_bytes > 0) {
    out.limits.push_back(core::MemoryLimit{
        core::LimitScope::kTotal, options_.explicit_limit_bytes,
        /*measured=*/false,
        absl::StrCat("--memory_limit_bytes=", options_.explicit_limit_bytes)});
  }
  return out;
}

void MemoryLimitReader::ReadCgroups(LimitReading* out) const {
  const std::string& root = options_.root;
  absl::StatusOr<std::string> self =
      ReadSmallFile(absl::StrCat(root, "/proc/self/cgroup"));
  absl::StatusOr<std::string> mountinfo =
      ReadSmallFile(absl::StrCat(root, "/proc/self/mountinfo"));
  if (!self.ok() || !mountinfo.ok()) {
    // No /proc: not Linux as we know it; nothing to bound.
    out->unreadable.push_back(
        std::string((self.ok() ? mountinfo : self).status().message()));
    return;
  }
  const ProcCgroup cgroup = ParseProcSelfCgroup(*self);
  for (const CgroupMount& mount : ParseCgroupMounts(*mountinfo)) {
    const std::optional<std::string>& path =
        mount.v2 ? cgroup.v2_path : cgroup.v1_memory_path;
    if (!path.has_value()) continue;
    const std::optional<std::string> leaf = CgroupDirectory(mount, *path);
    if (!leaf.has_value()) continue;
    const CgroupFiles& files = mount.v2 ? kV2 : kV1;
    // From the process's cgroup up to the mount's root: every level's
    // limit applies to the process.
    std::optional<core::MemoryLimit> tightest;
    for (std::string dir = *leaf;; dir = Parent(dir)) {
      const std::string limit_path = absl::StrCat(root, dir, "/", files.limit);
      absl::StatusOr<std::string> limit_text = ReadSmallFile(limit_path);
      // The root cgroup has no memory.max; a hierarchy without the memory
      // controller enabled has no such files at all.
      absl::StatusOr<std::optional<int64_t>> limit =
          limit_text.ok() ? ParseCgroupLimit(*limit_text)
                          : absl::StatusOr<std::optional<int64_t>>(
                                std::optional<int64_t>());
      if (!limit.ok()) {
        out->unreadable.push_back(
            absl::StrCat(limit_path, ": ", limit.status().message()));
      } else if (limit->has_value()) {
        const std::string usage_path =
            absl::StrCat(root, dir, "/", files.usage);
        absl::StatusOr<std::string> usage_text = ReadSmallFile(usage_path);
        absl::StatusOr<int64_t> usage =
            usage_text.ok() ? ParseCgroupBytes(*usage_text)
                            : absl::StatusOr<int64_t>(usage_text.status());
        if (!usage.ok()) {
          out->unreadable.push_back(
              absl::StrCat(usage_path, ": ", usage.status().message()));
          // The limit alone still bounds the plan.
          usage = 0;
        }
        int64_t reclaimable = 0;
        if (absl::StatusOr<std::string> stat =
                ReadSmallFile(absl::StrCat(root, dir, "/memory.stat"));
            stat.ok()) {
          reclaimable =
              ParseKeyedValue(*stat, files.inactive_file_key)
                  .value_or(
                      ParseKeyedValue(*stat, files.fallback_inactive_file_key)
                          .value_or(0));
        }
        const int64_t in_use = std::max<int64_t>(*usage - reclaimable, 0);
        const int64_t available = std::max<int64_t>(**limit - in_use, 0);
        if (!tightest.has_value() || available < tightest->available_bytes) {
          tightest = core::MemoryLimit{
              core::LimitScope::kHost, available, /*measured=*/true,
              absl::StrCat("cgroup ", files.version, " ", files.limit, " of ",
                           dir, " (", core::FormatBytes(**limit), " limit, ",
                           core::FormatBytes(in_use), " in use)")};
        }
      }
      if (dir.size() <= mount.mount_point.size() || dir == "/") break;
    }
    if (tightest.has_value()) out->limits.push_back(*std::move(tightest));
  }
}

void MemoryLimitReader::ReadMemAvailable(LimitReading* out) const {
  const std::string path = absl::StrCat(options_.root, "/proc/meminfo");
  absl::StatusOr<std::string> meminfo = ReadSmallFile(path);
  absl::StatusOr<int64_t> available =
      meminfo.ok() ? ParseMemAvailable(*meminfo)
                   : absl::StatusOr<int64_t>(meminfo.status());
  if (!available.ok()) {
    out->unreadable.push_back(std::string(available.status().message()));
    return;
  }
  out->limits.push_back(core::MemoryLimit{core::LimitScope::kHost, *available,
                                          /*measured=*/true,
                                          "/proc/meminfo MemAvailable"});
}

void MemoryLimitReader::ReadShmSpace(LimitReading* out) const {
  if (options_.shm_dir.empty()) return;
  struct statvfs fs;
  if (statvfs(options_.shm_dir.c_str(), &fs) != 0) {
    out->unreadable.push_back(
        std::string(ErrnoStatus(errno, "statvfs", options_.shm_dir).message()));
    return;
  }
  const int64_t block = static_cast<int64_t>(fs.f_frsize);
  const auto bytes = [block](fsblkcnt_t blocks) {
    return core::CheckedMul(static_cast<int64_t>(blocks), block)
        .value_or(std::numeric_limits<int64_t>::max());
  };
  out->limits.push_back(core::MemoryLimit{
      core::LimitScope::kShm, bytes(fs.f_bavail), /*measured=*/true,
      absl::StrCat("free space of ", options_.shm_dir, " (a ",
                   core::FormatBytes(bytes(fs.f_blocks)), " file system)")});
}

void MemoryLimitReader::ReadDevice(LimitReading* out) const {
  if (!options_.device_memory) return;
  absl::StatusOr<DeviceMemoryInfo> info = options_.device_memory();
  if (!info.ok()) {
    out->unreadable.push_back(std::string(info.status().message()));
    return;
  }
  out->limits.push_back(core::MemoryLimit{
      core::LimitScope::kDevice, info->free_bytes, /*measured=*/true,
      absl::StrCat("cudaMemGetInfo of ", options_.device_name, " (",
                   core::FormatBytes(info->free_bytes), " free of ",
                   core::FormatBytes(info->total_bytes), ")")});
}

}  // namespace shardd::memory
