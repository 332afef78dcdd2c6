#include "daemon/memory/shm_sweeper.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "daemon/memory/shm_owner_lock.h"

namespace shardd::memory {
namespace {

struct OwnedFile {
  std::string name;
  int64_t bytes = 0;
};

// "<family><digits>" of "<family><digits>.<rest>", or "".
std::string PrefixOf(absl::string_view name, absl::string_view family) {
  if (!absl::StartsWith(name, family)) return "";
  const size_t dot = name.find('.', family.size());
  if (dot == absl::string_view::npos || dot == family.size() ||
      dot + 1 == name.size()) {
    return "";
  }
  for (size_t i = family.size(); i < dot; ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(name[i]))) return "";
  }
  return std::string(name.substr(0, dot));
}

enum class Owner { kLive, kDead, kUnknown };

}  // namespace

absl::StatusOr<ShmSweepResult> SweepShmDirectory(absl::string_view dir,
                                                 absl::string_view family) {
  const std::string directory(dir);
  DIR* d = ::opendir(directory.c_str());
  if (d == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("opendir ", directory));
  }
  std::map<std::string, std::vector<OwnedFile>> groups;
  const uid_t me = ::geteuid();
  while (const dirent* entry = ::readdir(d)) {
    const std::string name = entry->d_name;
    const std::string prefix = PrefixOf(name, family);
    if (prefix.empty()) continue;
    struct stat st;
    if (::fstatat(dirfd(d), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      continue;  // Gone meanwhile.
    }
    if (!S_ISREG(st.st_mode) || st.st_uid != me) continue;  // Not ours.
    groups[prefix].push_back({name, static_cast<int64_t>(st.st_blocks) * 512});
  }
  ::closedir(d);

  ShmSweepResult result;
  for (const auto& [prefix, files] : groups) {
    // The owner file is looked up by name, not from the listing: a daemon
    // that started during the listing has it before any segment.
    const std::string owner_path =
        absl::StrCat(directory, "/", ShmOwnerLock::FileName(prefix));
    Owner owner = Owner::kUnknown;
    const int fd =
        ::open(owner_path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    absl::Cleanup close_fd = [fd] {
      if (fd >= 0) ::close(fd);
    };
    if (fd >= 0) {
      owner = ::flock(fd, LOCK_EX | LOCK_NB) == 0 ? Owner::kDead : Owner::kLive;
    } else {
      // Without an owner file the number names the owner: only a pid
      // that cannot exist any more (a positive one kill() says is gone)
      // makes the files a dead daemon's. 0 (or an overflowing number) is
      // no pid, so nothing says whose the files are: they stay.
      int64_t pid = 0;
      const bool is_pid =
          absl::SimpleAtoi(prefix.substr(family.size()), &pid) && pid > 0 &&
          pid <= INT32_MAX;
      const bool gone =
          is_pid && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
      owner = gone ? Owner::kDead : Owner::kUnknown;
    }
    if (owner == Owner::kLive) continue;
    int64_t bytes = 0;
    for (const OwnedFile& f : files) bytes += f.bytes;
    if (owner == Owner::kUnknown) {
      result.unknown_files += static_cast<int64_t>(files.size());
      result.unknown_bytes += bytes;
      continue;
    }
    int64_t removed = 0;
    int64_t freed = 0;
    for (const OwnedFile& f : files) {
      if (f.name == ShmOwnerLock::FileName(prefix)) continue;
      if (::unlink(absl::StrCat(directory, "/", f.name).c_str()) == 0) {
        ++removed;
        freed += f.bytes;
      }
    }
    // Last, still locked by us: nobody takes the prefix for a dead one.
    if (fd >= 0 && ::unlink(owner_path.c_str()) == 0) ++removed;
    result.files_removed += removed;
    result.bytes_removed += freed;
    result.removed.push_back(
        absl::StrCat(prefix, ": ", removed, " files, ", freed, " bytes"));
  }
  return result;
}

}  // namespace shardd::memory
