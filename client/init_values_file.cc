#include "client/init_values_file.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::client {

absl::StatusOr<InitValuesFile> InitValuesFile::Write(
    absl::string_view directory,
    const std::vector<absl::Span<const float>>& tensors) {
  static std::atomic<int> next{0};
  InitValuesFile file;
  file.path_ = absl::StrCat(directory, "/shardd-init-", getpid(), "-",
                            next.fetch_add(1));
  const int fd =
      open(file.path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int error = errno;
    file.path_.clear();
    return absl::ErrnoToStatus(
        error, absl::StrCat("cannot create init values in ", directory));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  for (absl::Span<const float> tensor : tensors) {
    const int64_t length = static_cast<int64_t>(tensor.size() * sizeof(float));
    file.ranges_.emplace_back(file.bytes_, length);
    const char* p = reinterpret_cast<const char*>(tensor.data());
    for (int64_t done = 0; done < length;) {
      const ssize_t n = write(fd, p + done, length - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        // `file` unlinks what was written when it goes.
        return absl::ErrnoToStatus(
            n < 0 ? errno : ENOSPC,
            absl::StrCat("cannot write init values to ", file.path_));
      }
      done += n;
    }
    file.bytes_ += length;
  }
  return file;
}

InitValuesFile::InitValuesFile(InitValuesFile&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      bytes_(other.bytes_),
      ranges_(std::move(other.ranges_)) {}

InitValuesFile& InitValuesFile::operator=(InitValuesFile&& other) noexcept {
  if (this != &other) {
    if (!path_.empty()) unlink(path_.c_str());
    path_ = std::exchange(other.path_, std::string());
    bytes_ = other.bytes_;
    ranges_ = std::move(other.ranges_);
  }
  return *this;
}

InitValuesFile::~InitValuesFile() {
  if (!path_.empty()) unlink(path_.c_str());
}

v1::SharedMemoryRef InitValuesFile::Ref(int i) const {
  v1::SharedMemoryRef ref;
  ref.set_path(path_);
  ref.set_segment_bytes(bytes_);
  ref.set_byte_offset(ranges_[i].first);
  ref.set_byte_length(ranges_[i].second);
  return ref;
}

}  // namespace shardd::client
