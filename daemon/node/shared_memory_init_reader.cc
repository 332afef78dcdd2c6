#include "daemon/node/shared_memory_init_reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "daemon/core/crc32c.h"

namespace shardd::node {

namespace {

// A window buffer of `bytes`, advised onto huge pages: a fresh 4 KiB page
// costs a fault each, and on some VMs (shadow paging) a fault costs
// microseconds. Unmapped on destruction.
class WindowBuffer {
 public:
  explicit WindowBuffer(int64_t bytes) : bytes_(static_cast<size_t>(bytes)) {
    void* p = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      data_ = static_cast<char*>(p);
      (void)madvise(p, bytes_, MADV_HUGEPAGE);  // Advice only.
    }
  }
  ~WindowBuffer() {
    if (data_ != nullptr) munmap(data_, bytes_);
  }
  WindowBuffer(const WindowBuffer&) = delete;
  WindowBuffer& operator=(const WindowBuffer&) = delete;
  char* data() const { return data_; }

 private:
  const size_t bytes_;
  char* data_ = nullptr;
};

}  // namespace

absl::Status SharedMemoryInitReader::ReadBytes(
    const core::SharedMemorySource& source, int64_t begin, int64_t end,
    absl::string_view field, const std::function<char*(int64_t length)>& into,
    const std::function<void(const char* bytes, int64_t length)>& visit) {
  if (begin < 0 || end < begin || end > source.byte_length ||
      source.byte_offset < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        field, ": bytes [", begin, ", ", end, ") are outside the range of ",
        source.byte_length, " bytes at offset ", source.byte_offset));
  }
  const int fd = open(source.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const absl::Status status = absl::ErrnoToStatus(
        error, absl::StrCat(field, ".path: cannot open ", source.path));
    // A missing segment is the trainer's mistake, whatever errno says.
    return error == ENOENT ? absl::NotFoundError(status.message()) : status;
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat(field, ": fstat ", source.path));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".path: ", source.path, " is not a regular file"));
  }
  if (st.st_size < source.byte_offset + source.byte_length) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".byte_length: ", source.path, " has ", st.st_size,
                     " bytes, fewer than byte_offset + byte_length = ",
                     source.byte_offset + source.byte_length));
  }
  // Positioned reads, not a mapping: the kernel copies from the file's
  // pages, so neither the source's pages nor (for a destination already in
  // memory) ours are faulted in one by one; and a file that shrinks under
  // us is a status, not a SIGBUS.
  for (int64_t at = begin; at < end; at += kWindowBytes) {
    const int64_t length = std::min(kWindowBytes, end - at);
    char* out = into(length);
    for (int64_t done = 0; done < length;) {
      const ssize_t n =
          pread(fd, out + done, static_cast<size_t>(length - done),
                source.byte_offset + at + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        return absl::ErrnoToStatus(
            errno, absl::StrCat(field, ": cannot read ", source.path, " at ",
                                source.byte_offset + at + done));
      }
      if (n == 0) {
        return absl::FailedPreconditionError(absl::StrCat(
            field, ": ", source.path, " shrank while it was read (at byte ",
            source.byte_offset + at + done, ")"));
      }
      done += n;
    }
    visit(out, length);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SharedMemoryInitReader::Checksum(
    const core::SharedMemorySource& source, absl::string_view field) {
  uint32_t crc = 0;
  WindowBuffer window(
      std::max<int64_t>(1, std::min(kWindowBytes, source.byte_length)));
  if (window.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(field, ": cannot map a read window"));
  }
  absl::Status status = ReadBytes(
      source, 0, source.byte_length, field,
      [&window](int64_t) { return window.data(); },
      [&crc](const char* bytes, int64_t length) {
        crc = core::Crc32cExtend(crc, bytes, static_cast<size_t>(length));
      });
  if (!status.ok()) return status;
  return crc;
}

absl::Status SharedMemoryInitReader::Read(
    const core::SharedMemorySource& source, core::DType dtype,
    int64_t first_element, int64_t n, float* out, absl::string_view field) {
  const int64_t size = core::DTypeSize(dtype);
  if (first_element < 0 || n < 0 ||
      first_element > source.byte_length / size - n) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": elements [", first_element, ", ", first_element,
                     "+", n, ") are outside the ", source.byte_length / size,
                     " elements of ", core::DTypeName(dtype)));
  }
  if (n == 0) return absl::OkStatus();
  if (dtype == core::DType::kFloat32) {
    // Straight into the destination.
    char* next = reinterpret_cast<char*>(out);
    return ReadBytes(
        source, first_element * size, (first_element + n) * size, field,
        [&next](int64_t length) {
          char* at = next;
          next += length;
          return at;
        },
        [](const char*, int64_t) {});
  }
  // Windows start at multiples of kWindowBytes past the first element, so
  // none splits an element.
  WindowBuffer window(std::min(kWindowBytes, n * size));
  if (window.data() == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(field, ": cannot map a read window"));
  }
  float* next = out;
  return ReadBytes(
      source, first_element * size, (first_element + n) * size, field,
      [&window](int64_t) { return window.data(); },
      [&next, dtype](const char* bytes, int64_t length) {
        const int64_t count = length / 2;
        for (int64_t i = 0; i < count; ++i) {
          uint16_t bits;
          std::memcpy(&bits, bytes + i * 2, 2);
          next[i] = dtype == core::DType::kBFloat16
                        ? core::BFloat16ToFloat(bits)
                        : core::HalfToFloat(bits);
        }
        next += count;
      });
}

}  // namespace shardd::node
