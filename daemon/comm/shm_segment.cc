#include "daemon/comm/shm_segment.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::comm {
namespace {

absl::StatusOr<uint8_t*> Map(int fd, int64_t bytes, const std::string& name) {
  void* p = ::mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mmap ", name));
  }
  return static_cast<uint8_t*>(p);
}

}  // namespace

ShmSegment::~ShmSegment() { ::munmap(data_, static_cast<size_t>(size_)); }

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Create(
    const std::string& name, int64_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("shm_open ", name));
  }
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  absl::Cleanup unlink = [&name] { ::shm_unlink(name.c_str()); };
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("ftruncate ", name));
  }
  // The pages are allocated here, where a full /dev/shm is ENOSPC (the
  // group then falls back to Gloo), instead of by the first write to them,
  // where it would be SIGBUS.
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      err != 0) {
    return absl::ErrnoToStatus(err, absl::StrCat("posix_fallocate ", name));
  }
  absl::StatusOr<uint8_t*> data = Map(fd, bytes, name);
  if (!data.ok()) return data.status();
  // MAP_POPULATE maps the pages; writing them faults them in now, not in
  // the first collective.
  std::memset(*data, 0, static_cast<size_t>(bytes));
  std::move(unlink).Cancel();
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, *data, bytes));
}

absl::StatusOr<std::unique_ptr<ShmSegment>> ShmSegment::Open(
    const std::string& name, int64_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("shm_open ", name));
  }
  absl::Cleanup close_fd = [fd] { ::close(fd); };
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", name));
  }
  if (st.st_size != bytes) {
    return absl::FailedPreconditionError(
        absl::StrCat(name, " is ", st.st_size, " bytes, expected ", bytes));
  }
  absl::StatusOr<uint8_t*> data = Map(fd, bytes, name);
  if (!data.ok()) return data.status();
  return std::unique_ptr<ShmSegment>(new ShmSegment(name, *data, bytes));
}

absl::Status ShmSegment::Unlink(const std::string& name) {
  if (::shm_unlink(name.c_str()) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("shm_unlink ", name));
  }
  return absl::OkStatus();
}

}  // namespace shardd::comm
