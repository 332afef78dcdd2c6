#include "daemon/memory/private_allocator.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14.
#endif

namespace shardd::memory {
namespace {

constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kPopulateSlice = int64_t{64} << 20;
constexpr int64_t kPage = 4096;

class PrivateBuffer : public ByteBuffer {
 public:
  PrivateBuffer(uint8_t* data, int64_t size, int64_t mapped)
      : data_(data), size_(size), mapped_(mapped) {}
  ~PrivateBuffer() override { munmap(data_, static_cast<size_t>(mapped_)); }
  PrivateBuffer(const PrivateBuffer&) = delete;
  PrivateBuffer& operator=(const PrivateBuffer&) = delete;

  uint8_t* data() override { return data_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  uint8_t* const data_;
  const int64_t size_;
  const int64_t mapped_;
  const std::string name_;
};

// Fault in [p, p + bytes) for writing. Anonymous memory is zero already;
// a kernel without MADV_POPULATE_WRITE gets one write per page.
void Prefault(uint8_t* p, int64_t bytes) {
  for (int64_t offset = 0; offset < bytes; offset += kPopulateSlice) {
    const int64_t n = std::min(kPopulateSlice, bytes - offset);
    if (madvise(p + offset, static_cast<size_t>(n), MADV_POPULATE_WRITE) == 0) {
      continue;
    }
    for (int64_t i = offset; i < offset + n; i += kPage) {
      static_cast<volatile uint8_t*>(p)[i] = 0;
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteBuffer>> PrivateAllocator::Allocate(
    absl::string_view name, int64_t bytes) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": buffer size must be >= 1 byte, got ", bytes));
  }
  const int64_t mapped = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // Over-map by one huge page and trim both ends so that the buffer starts
  // on a 2 MiB boundary (a THP can only back an aligned 2 MiB range).
  const int64_t reserve = mapped + kHugePage;
  void* raw = mmap(nullptr, static_cast<size_t>(reserve),
                   PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    const int error = errno;
    return absl::ResourceExhaustedError(absl::StrCat(
        name, ": cannot map ", bytes, " bytes: ", std::strerror(error)));
  }
  const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned =
      (start + kHugePage - 1) / kHugePage * static_cast<uintptr_t>(kHugePage);
  const size_t head = aligned - start;
  const size_t tail = static_cast<size_t>(reserve) - head - mapped;
  if (head > 0) munmap(raw, head);
  if (tail > 0) munmap(reinterpret_cast<void*>(aligned + mapped), tail);
  uint8_t* data = reinterpret_cast<uint8_t*>(aligned);
  (void)madvise(data, static_cast<size_t>(mapped), MADV_HUGEPAGE);  // Advice.
  Prefault(data, mapped);
  return std::make_unique<PrivateBuffer>(data, bytes, mapped);
}

}  // namespace shardd::memory
