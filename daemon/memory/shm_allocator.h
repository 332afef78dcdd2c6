#ifndef SHARDD_DAEMON_MEMORY_SHM_ALLOCATOR_H_
#define SHARDD_DAEMON_MEMORY_SHM_ALLOCATOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "daemon/memory/byte_buffer.h"

namespace shardd::memory {

// A BufferAllocator whose buffers are SharedMemorySegments (mode 0600,
// pre-faulted, zero-filled) in one directory, so that every buffer a daemon
// hands a trainer can be mapped by the trainer without a copy. The buffer's
// name() is the segment's path; destroying the buffer unmaps and unlinks it.
//
// Segment names are "<prefix>.<counter>.<name>" with the name sanitised to
// [A-Za-z0-9._-] (the prefix should make them unique per process, e.g.
// "shardd-<pid>"). Thread-safe.
class ShmAllocator : public BufferAllocator {
 public:
  ShmAllocator(std::string directory, std::string prefix)
      : directory_(std::move(directory)), prefix_(std::move(prefix)) {}

  absl::StatusOr<std::unique_ptr<ByteBuffer>> Allocate(absl::string_view name,
                                                       int64_t bytes) override;

  const std::string& directory() const { return directory_; }

 private:
  const std::string directory_;
  const std::string prefix_;
  std::atomic<int64_t> counter_{0};
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_SHM_ALLOCATOR_H_
