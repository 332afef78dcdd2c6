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

absl::Status SharedMemoryInitReader::ForEachWindow(
    const core::SharedMemorySource& source, int64_t begin, int64_t end,
    absl::string_view field,
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
  const int64_t page = sysconf(_SC_PAGESIZE);
  for (int64_t at = begin; at < end; at += kWindowBytes) {
    const int64_t length = std::min(kWindowBytes, end - at);
    const int64_t file_offset = source.byte_offset + at;
    const int64_t lead = file_offset % page;
    const size_t mapped = static_cast<size_t>(lead + length);
    // MAP_POPULATE: the window is read once, front to back; faulting it in
    // one call is cheaper than a fault per page.
    void* p = mmap(nullptr, mapped, PROT_READ, MAP_SHARED | MAP_POPULATE, fd,
                   file_offset - lead);
    if (p == MAP_FAILED) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat(field, ": cannot map ", length, " bytes of ",
                              source.path, " at ", file_offset));
    }
    absl::Cleanup unmap = [p, mapped] { munmap(p, mapped); };
    visit(static_cast<const char*>(p) + lead, length);
  }
  return absl::OkStatus();
}

absl::StatusOr<uint32_t> SharedMemoryInitReader::Checksum(
    const core::SharedMemorySource& source, absl::string_view field) {
  uint32_t crc = 0;
  absl::Status status = ForEachWindow(
      source, 0, source.byte_length, field,
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
  // Windows start at multiples of kWindowBytes past the first element, so
  // none splits an element.
  float* next = out;
  return ForEachWindow(
      source, first_element * size, (first_element + n) * size, field,
      [&next, dtype, size](const char* bytes, int64_t length) {
        const int64_t count = length / size;
        if (dtype == core::DType::kFloat32) {
          std::memcpy(next, bytes, static_cast<size_t>(length));
        } else {
          for (int64_t i = 0; i < count; ++i) {
            uint16_t bits;
            std::memcpy(&bits, bytes + i * 2, 2);
            next[i] = dtype == core::DType::kBFloat16
                          ? core::BFloat16ToFloat(bits)
                          : core::HalfToFloat(bits);
          }
        }
        next += count;
      });
}

}  // namespace shardd::node
