#ifndef SHARDD_DAEMON_COMM_SHM_SEGMENT_H_
#define SHARDD_DAEMON_COMM_SHM_SEGMENT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::comm {

// Every communicator segment's name in the POSIX shared-memory directory
// starts with this family and the creating process's pid
// ("sharddcoll-<pid>.e<E>-<group>-<random>"): the name lives only until
// every rank has mapped the segment, and a creator killed before that
// leaves it behind for the daemons' sweep (memory::SweepShmDirectory with
// this family removes the names of pids that are gone).
inline constexpr char kShmSegmentFamily[] = "sharddcoll-";

// One mapping of a POSIX shared-memory object (shm_open, /dev/shm), the
// medium of a ShmCollective.
//
// Responsible for: creating (exclusively, mode 0600, sized and pre-faulted
// so that no collective takes a page fault on fresh memory), opening an
// existing one of a known size, and unmapping it when destroyed. The name
// is unlinked separately (Unlink), as soon as every rank has mapped it, so
// that nothing is left in /dev/shm however the processes end later.
// Owns the mapping; immutable after construction, so thread-safe.
class ShmSegment {
 public:
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // `name` is "/<something>" without further slashes. ALREADY_EXISTS when
  // the name is taken; the errno's status for any other failure (the name
  // is removed again then).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Create(
      const std::string& name, int64_t bytes);
  // Maps an existing object, which must be exactly `bytes` long
  // (FAILED_PRECONDITION otherwise).
  static absl::StatusOr<std::unique_ptr<ShmSegment>> Open(
      const std::string& name, int64_t bytes);
  // Removes the name; a name already gone is fine.
  static absl::Status Unlink(const std::string& name);

  uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  ShmSegment(std::string name, uint8_t* data, int64_t size)
      : name_(std::move(name)), data_(data), size_(size) {}

  const std::string name_;
  uint8_t* const data_;
  const int64_t size_;
};

}  // namespace shardd::comm

#endif  // SHARDD_DAEMON_COMM_SHM_SEGMENT_H_
