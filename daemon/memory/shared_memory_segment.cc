#include "daemon/memory/shared_memory_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace shardd::memory {
namespace {

// errno through absl::ErrnoToStatus (the one errno table: ENOENT is
// NOT_FOUND, EACCES/EPERM/EROFS PERMISSION_DENIED, ENOSPC/ENOMEM/EDQUOT/
// EMFILE/ENFILE RESOURCE_EXHAUSTED, ...), with what failed in the message.
absl::Status ErrnoStatus(int err, absl::string_view what,
                         absl::string_view path, absl::string_view call) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " '", path, "': ", call));
}

// Closes a descriptor on every return path.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14.
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

// Fills the page tables of [data, data + bytes) a slice at a time (see the
// class comment: the mmap lock is released between slices). Best effort:
// a kernel without MADV_POPULATE_* leaves it to the touch that follows.
void PopulateInSlices(void* data, int64_t bytes, bool write) {
  constexpr int64_t kSlice = int64_t{64} << 20;
  char* p = static_cast<char*>(data);
  for (int64_t offset = 0; offset < bytes; offset += kSlice) {
    const int64_t n = std::min(kSlice, bytes - offset);
    if (madvise(p + offset, static_cast<size_t>(n),
                write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ) != 0) {
      return;
    }
  }
}

int64_t RoundUpToPage(int64_t size) {
  const int64_t page = SharedMemorySegment::PageSize();
  return (size + page - 1) / page * page;
}

// One write per page from user space: the kernel's populate fills its page
// tables, but on virtual machines that back memory lazily the first user
// write to each page still costs a fault; the class comment says why it is
// paid here.
void TouchForWrite(void* data, int64_t mapped_size, bool fresh) {
  const int64_t page = SharedMemorySegment::PageSize();
  char* bytes = static_cast<char*>(data);
  for (int64_t offset = 0; offset < mapped_size; offset += page) {
    if (fresh) {
      // A new file is all zeros and nobody else has it mapped yet.
      *static_cast<volatile char*>(bytes + offset) = 0;
    } else {
      // Someone may be writing: an atomic no-op read-modify-write loses no
      // concurrent update and still counts as a write.
      __atomic_fetch_or(bytes + offset, 0, __ATOMIC_RELAXED);
    }
  }
}

void TouchForRead(const void* data, int64_t mapped_size) {
  const int64_t page = SharedMemorySegment::PageSize();
  const volatile char* bytes = static_cast<const volatile char*>(data);
  char sink = 0;
  for (int64_t offset = 0; offset < mapped_size; offset += page) {
    sink = static_cast<char>(sink ^ bytes[offset]);
  }
  (void)sink;
}

}  // namespace

int64_t SharedMemorySegment::PageSize() {
  static const int64_t page = sysconf(_SC_PAGESIZE);
  return page;
}

absl::StatusOr<SharedMemorySegment> SharedMemorySegment::Create(
    absl::string_view directory, absl::string_view name, int64_t size) {
  if (name.empty() || name.find('/') != absl::string_view::npos ||
      name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory segment name '", name,
                     "' must be a non-empty file name without '/'"));
  }
  const std::string path = absl::StrCat(directory, "/", name);
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory segment '", path, "': size must be >= 1, got ", size));
  }
  constexpr absl::string_view kWhat = "create shared memory segment";
  const std::string dir(directory);
  struct stat dir_stat;
  if (stat(dir.c_str(), &dir_stat) != 0) {
    return ErrnoStatus(errno, kWhat, path,
                       absl::StrCat("stat of directory '", dir, "'"));
  }
  if (!S_ISDIR(dir_stat.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWhat, " '", path, "': '", dir, "' is not a directory"));
  }
  if ((dir_stat.st_mode & S_IWOTH) != 0 && (dir_stat.st_mode & S_ISVTX) == 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(kWhat, " '", path, "': directory '", dir,
                     "' is world-writable without the sticky bit, so others "
                     "could remove or replace the segment"));
  }

  const int fd = open(path.c_str(),
                      O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return ErrnoStatus(errno, kWhat, path, "open");
  FdCloser closer(fd);
  // From here on the file is ours: remove it on every failure.
  auto fail = [&](absl::Status status) {
    unlink(path.c_str());
    return status;
  };

  // The umask can only clear bits, but a restrictive one could leave the
  // owner without access: make the mode exactly 0600 and check it.
  if (fchmod(fd, 0600) != 0) {
    return fail(ErrnoStatus(errno, kWhat, path, "fchmod"));
  }
  struct stat file_stat;
  if (fstat(fd, &file_stat) != 0) {
    return fail(ErrnoStatus(errno, kWhat, path, "fstat"));
  }
  if ((file_stat.st_mode & 07777) != 0600 || file_stat.st_uid != geteuid()) {
    return fail(absl::PermissionDeniedError(absl::StrCat(
        kWhat, " '", path, "': ",
        absl::StrFormat("mode %04o owner %d, expected 0600 owner %d",
                        file_stat.st_mode & 07777, file_stat.st_uid,
                        geteuid()))));
  }

  // posix_fallocate reserves the pages now, so a full tmpfs is a status here
  // instead of a SIGBUS at the first touch. File systems without fallocate
  // (EOPNOTSUPP) fall back to ftruncate.
  const int alloc_err = posix_fallocate(fd, 0, size);
  if (alloc_err == EOPNOTSUPP || alloc_err == EINVAL) {
    if (ftruncate(fd, size) != 0) {
      return fail(ErrnoStatus(errno, kWhat, path, "ftruncate"));
    }
  } else if (alloc_err != 0) {
    return fail(ErrnoStatus(alloc_err, kWhat, path, "posix_fallocate"));
  }

  const int64_t mapped_size = RoundUpToPage(size);
  void* data =
      mmap(nullptr, mapped_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) {
    return fail(ErrnoStatus(errno, kWhat, path, "mmap"));
  }
  PopulateInSlices(data, mapped_size, /*write=*/true);
  TouchForWrite(data, mapped_size, /*fresh=*/true);
  return SharedMemorySegment(path, data, size, mapped_size, Access::kReadWrite,
                             /*owns_file=*/true);
}

absl::StatusOr<SharedMemorySegment> SharedMemorySegment::Open(
    absl::string_view path, int64_t size, Access access) {
  const std::string file(path);
  if (size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shared memory segment '", path, "': size must be >= 1, got ", size));
  }
  constexpr absl::string_view kWhat = "open shared memory segment";
  const int flags = (access == Access::kReadWrite ? O_RDWR : O_RDONLY) |
                    O_NOFOLLOW | O_CLOEXEC;
  const int fd = open(file.c_str(), flags);
  if (fd < 0) return ErrnoStatus(errno, kWhat, path, "open");
  FdCloser closer(fd);
  struct stat file_stat;
  if (fstat(fd, &file_stat) != 0) {
    return ErrnoStatus(errno, kWhat, path, "fstat");
  }
  if (!S_ISREG(file_stat.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWhat, " '", path, "': not a regular file"));
  }
  if (file_stat.st_size < size) {
    return absl::FailedPreconditionError(
        absl::StrCat(kWhat, " '", path, "': the file has ", file_stat.st_size,
                     " bytes, fewer than the ", size, " expected"));
  }
  const int64_t mapped_size = RoundUpToPage(size);
  const int prot =
      access == Access::kReadWrite ? PROT_READ | PROT_WRITE : PROT_READ;
  void* data = mmap(nullptr, mapped_size, prot, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return ErrnoStatus(errno, kWhat, path, "mmap");
  // Only pages inside the file may be touched (beyond it is SIGBUS).
  const int64_t touchable =
      std::min<int64_t>(mapped_size, RoundUpToPage(file_stat.st_size));
  PopulateInSlices(data, touchable, access == Access::kReadWrite);
  if (access == Access::kReadWrite) {
    TouchForWrite(data, touchable, /*fresh=*/false);
  } else {
    TouchForRead(data, touchable);
  }
  return SharedMemorySegment(file, data, size, mapped_size, access,
                             /*owns_file=*/false);
}

SharedMemorySegment::SharedMemorySegment(SharedMemorySegment&& other) noexcept
    : path_(std::move(other.path_)),
      data_(other.data_),
      size_(other.size_),
      mapped_size_(other.mapped_size_),
      access_(other.access_),
      owns_file_(other.owns_file_) {
  other.data_ = nullptr;
  other.size_ = 0;
  other.mapped_size_ = 0;
  other.owns_file_ = false;
  other.path_.clear();
}

SharedMemorySegment& SharedMemorySegment::operator=(
    SharedMemorySegment&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    mapped_size_ = other.mapped_size_;
    access_ = other.access_;
    owns_file_ = other.owns_file_;
    other.data_ = nullptr;
    other.size_ = 0;
    other.mapped_size_ = 0;
    other.owns_file_ = false;
    other.path_.clear();
  }
  return *this;
}

SharedMemorySegment::~SharedMemorySegment() { Reset(); }

void SharedMemorySegment::Reset() {
  if (data_ != nullptr) munmap(data_, mapped_size_);
  // Unlink even if the mapping is gone: the name is what leaks otherwise.
  if (owns_file_) unlink(path_.c_str());
  data_ = nullptr;
  size_ = 0;
  mapped_size_ = 0;
  owns_file_ = false;
}

}  // namespace shardd::memory
