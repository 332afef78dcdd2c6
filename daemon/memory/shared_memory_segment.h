#ifndef SHARDD_DAEMON_MEMORY_SHARED_MEMORY_SEGMENT_H_
#define SHARDD_DAEMON_MEMORY_SHARED_MEMORY_SEGMENT_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::memory {

// A file in a shared-memory directory (normally /dev/shm) mapped MAP_SHARED:
// the buffer that gathered parameters and gradients live in, written by the
// daemon's collectives and read by the trainer through its own mapping of the
// same file, without a copy.
//
// Two roles:
// - Create (the owner, the daemon): makes a new file with O_CREAT|O_EXCL and
//   mode 0600 (checked with fstat), reserves its blocks with posix_fallocate
//   (so a full tmpfs is RESOURCE_EXHAUSTED here, never a SIGBUS later), maps
//   it and pre-faults every page. Destruction unmaps and unlinks the file.
// - Open (a user, the trainer or a test): maps an existing file read-only or
//   read-write and pre-faults it; destruction only unmaps.
//
// Pre-faulting, so that no collective or trainer pays for first touches:
// the kernel populates the pages, then one write (or read) per page from
// user space. Both are needed on virtual machines that back guest memory
// lazily: the kernel's populate fills the guest's page tables, not the
// hypervisor's, and leaves most of the first-write cost behind. The cost
// is per mapping (a second process mapping the same pages pays it again),
// so Open pre-faults too.
//
// The kernel's part is done 64 MiB at a time with MADV_POPULATE_WRITE (or
// _READ), not with MAP_POPULATE: MAP_POPULATE holds the process's mmap lock
// for the whole mapping, so every other thread's mmap, munmap or brk (a
// gRPC allocation, a heartbeat) waits for it, for a large segment on fresh
// memory longer than a membership lease. Slices release the lock between
// them.
//
// Sizes: size() is the exact byte count asked for (the memory plan's
// figure) and the file's length; mapped_size() is that rounded up to whole
// pages, which is what the kernel actually holds.
//
// Directory: must exist and be a directory. A directory that others may
// write to must have the sticky bit (as /dev/shm and /tmp do), otherwise
// another user could unlink or replace our file: such a directory is
// PERMISSION_DENIED. O_EXCL|O_NOFOLLOW means an existing file or symlink is
// never reused (ALREADY_EXISTS).
//
// Errors name the path and the errno text: ENOENT -> NOT_FOUND, EEXIST ->
// ALREADY_EXISTS, EACCES/EPERM -> PERMISSION_DENIED, ENOSPC/ENOMEM/EDQUOT/
// EMFILE/ENFILE -> RESOURCE_EXHAUSTED, anything else INTERNAL.
//
// Ownership: the object owns its mapping (and, when created, the file). It is
// move-only; a moved-from object holds nothing. Thread-safety: the object is
// not synchronised; the bytes it maps are shared memory and any
// synchronisation of them is the users' business.
class SharedMemorySegment {
 public:
  enum class Access { kReadOnly, kReadWrite };

  // Creates `directory`/`name` of exactly `size` bytes (size >= 1; name
  // non-empty, without '/'), zero-filled and pre-faulted.
  static absl::StatusOr<SharedMemorySegment> Create(absl::string_view directory,
                                                    absl::string_view name,
                                                    int64_t size);

  // Maps the first `size` bytes (>= 1) of an existing file, which must be at
  // least that long (FAILED_PRECONDITION otherwise), and pre-faults them (a
  // read-write mapping is pre-faulted for writing without changing a byte).
  static absl::StatusOr<SharedMemorySegment> Open(absl::string_view path,
                                                  int64_t size, Access access);

  SharedMemorySegment(SharedMemorySegment&& other) noexcept;
  SharedMemorySegment& operator=(SharedMemorySegment&& other) noexcept;
  SharedMemorySegment(const SharedMemorySegment&) = delete;
  SharedMemorySegment& operator=(const SharedMemorySegment&) = delete;
  ~SharedMemorySegment();

  // Null for a read-only mapping (use data()).
  void* mutable_data() const {
    return access_ == Access::kReadWrite ? data_ : nullptr;
  }
  const void* data() const { return data_; }
  int64_t size() const { return size_; }
  int64_t mapped_size() const { return mapped_size_; }
  const std::string& path() const { return path_; }
  // True for a segment made by Create: destruction removes the file.
  bool owns_file() const { return owns_file_; }
  Access access() const { return access_; }

  // The system page size, for callers that account for mapped_size().
  static int64_t PageSize();

 private:
  SharedMemorySegment(std::string path, void* data, int64_t size,
                      int64_t mapped_size, Access access, bool owns_file)
      : path_(std::move(path)),
        data_(data),
        size_(size),
        mapped_size_(mapped_size),
        access_(access),
        owns_file_(owns_file) {}
  void Reset();

  std::string path_;
  void* data_ = nullptr;
  int64_t size_ = 0;
  int64_t mapped_size_ = 0;
  Access access_ = Access::kReadOnly;
  bool owns_file_ = false;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_SHARED_MEMORY_SEGMENT_H_
