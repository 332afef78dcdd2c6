#ifndef SHARDD_DAEMON_MEMORY_SHM_OWNER_LOCK_H_
#define SHARDD_DAEMON_MEMORY_SHM_OWNER_LOCK_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::memory {

// Marks the files a daemon creates in a shared-memory directory (the
// segments "<prefix>.<n>.<name>") as belonging to a live process: an
// exclusive flock held on "<dir>/<prefix>.owner" for the lifetime of this
// object. The kernel releases a flock when its process dies, however it
// dies (SIGKILL, OOM), so a sweeper that can take the lock knows, without
// guessing from process ids (which containers reuse: a restarted sidecar is
// often pid 1 again), that the owner is gone. The file is created unnamed
// (O_TMPFILE), locked and only then linked under its name, so nobody ever
// sees a live owner's file unlocked.
//
// Acquire before creating any segment with the prefix, and after sweeping
// the directory: a previous incarnation with the same prefix (the same pid)
// left its owner file behind, and the sweep removes it and its segments.
//
// Thread-safety: immutable after Acquire. Owns the descriptor and the name:
// destruction unlinks the file and releases the lock.
class ShmOwnerLock {
 public:
  // ALREADY_EXISTS when a live process holds "<prefix>.owner"; the errno's
  // code naming the path otherwise.
  static absl::StatusOr<std::unique_ptr<ShmOwnerLock>> Acquire(
      absl::string_view dir, absl::string_view prefix);

  ~ShmOwnerLock();
  ShmOwnerLock(const ShmOwnerLock&) = delete;
  ShmOwnerLock& operator=(const ShmOwnerLock&) = delete;

  const std::string& path() const { return path_; }

  // "<prefix>.owner": the owner file of a prefix.
  static std::string FileName(absl::string_view prefix);

 private:
  ShmOwnerLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}

  const std::string path_;
  const int fd_;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_SHM_OWNER_LOCK_H_
