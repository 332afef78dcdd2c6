#include "daemon/memory/testing/guarded_arena.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace shardd::memory::testing {
namespace {

constexpr int64_t kAlign = 4096;

class GuardedBuffer : public memory::ByteBuffer {
 public:
  GuardedBuffer(uint8_t* data, int64_t size) : data_(data), size_(size) {}
  uint8_t* data() override { return data_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  uint8_t* const data_;
  const int64_t size_;
  const std::string name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GuardedArena>> GuardedArena::Create(
    int64_t capacity_bytes) {
  const int64_t capacity = (capacity_bytes + kAlign - 1) / kAlign * kAlign;
  const int fd = memfd_create("shardd-guarded-arena", MFD_CLOEXEC);
  if (fd < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("memfd_create: ", std::strerror(errno)));
  }
  if (ftruncate(fd, capacity) != 0) {
    const int e = errno;
    close(fd);
    return absl::ResourceExhaustedError(
        absl::StrCat("ftruncate: ", std::strerror(e)));
  }
  void* device = mmap(nullptr, capacity, PROT_NONE, MAP_SHARED, fd, 0);
  void* backing =
      mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);  // The mappings keep the memory.
  if (device == MAP_FAILED || backing == MAP_FAILED) {
    if (device != MAP_FAILED) munmap(device, capacity);
    if (backing != MAP_FAILED) munmap(backing, capacity);
    return absl::ResourceExhaustedError("mmap of the guarded arena failed");
  }
  return std::unique_ptr<GuardedArena>(new GuardedArena(
      static_cast<uint8_t*>(device), static_cast<uint8_t*>(backing), capacity));
}

GuardedArena::GuardedArena(uint8_t* device, uint8_t* backing, int64_t capacity)
    : device_(device), backing_(backing), capacity_(capacity) {}

GuardedArena::~GuardedArena() {
  munmap(device_, capacity_);
  munmap(backing_, capacity_);
}

absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> GuardedArena::Allocate(
    absl::string_view name, int64_t bytes) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", name, "': bytes must be >= 1, got ", bytes));
  }
  absl::MutexLock lock(&mu_);
  const int64_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  if (rounded > capacity_ - used_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("buffer '", name, "': ", bytes, " B do not fit the ",
                     capacity_ - used_, " B left in the guarded arena"));
  }
  uint8_t* p = device_ + used_;
  used_ += rounded;
  return std::make_unique<GuardedBuffer>(p, bytes);
}

bool GuardedArena::Contains(const void* p, int64_t bytes) const {
  const uint8_t* q = static_cast<const uint8_t*>(p);
  return q >= device_ && bytes >= 0 && q <= device_ + capacity_ &&
         bytes <= device_ + capacity_ - q;
}

void* GuardedArena::Alias(const void* p) const {
  return backing_ + (static_cast<const uint8_t*>(p) - device_);
}

}  // namespace shardd::memory::testing
