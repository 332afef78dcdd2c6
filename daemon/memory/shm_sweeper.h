#ifndef SHARDD_DAEMON_MEMORY_SHM_SWEEPER_H_
#define SHARDD_DAEMON_MEMORY_SHM_SWEEPER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::memory {

struct ShmSweepResult {
  int64_t files_removed = 0;
  int64_t bytes_removed = 0;
  // One line per dead owner whose files were removed, for the log:
  // "shardd-123: 4 files, 201326592 bytes".
  std::vector<std::string> removed;
  // Files that look like a daemon's but whose owner cannot be told dead
  // (no owner file, and a process with that id exists), and their bytes:
  // left alone, and reported.
  int64_t unknown_files = 0;
  int64_t unknown_bytes = 0;
};

// Removes a dead daemon's files from a shared-memory directory.
//
// A daemon's files are "<family><pid>.<anything>" (segments
// "<family><pid>.<n>.<name>" and the owner file "<family><pid>.owner", see
// ShmOwnerLock), regular files of this user. For each such prefix the owner
// file decides: locked by a live process, nothing is touched; lockable, its
// owner is dead and every file of the prefix goes (the owner file last,
// still locked). Without an owner file (a daemon older than owner files),
// only a process id that does not exist here is taken as dead; otherwise
// the files stay and count as unknown. Anything else in the directory
// (other names, other users' files, directories, links) is never touched.
// Bytes are what the files occupy (st_blocks), which on tmpfs is memory.
//
// Stateless and thread-safe; errors reading the directory are returned,
// a file that vanishes meanwhile is skipped.
absl::StatusOr<ShmSweepResult> SweepShmDirectory(absl::string_view dir,
                                                 absl::string_view family);

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_SHM_SWEEPER_H_
