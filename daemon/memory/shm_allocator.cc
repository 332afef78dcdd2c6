#include "daemon/memory/shm_allocator.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "daemon/memory/shared_memory_segment.h"

namespace shardd::memory {
namespace {

class ShmBuffer : public ByteBuffer {
 public:
  explicit ShmBuffer(SharedMemorySegment segment)
      : segment_(std::move(segment)) {}
  uint8_t* data() override {
    return static_cast<uint8_t*>(segment_.mutable_data());
  }
  int64_t size() const override { return segment_.size(); }
  const std::string& name() const override { return segment_.path(); }

 private:
  SharedMemorySegment segment_;
};

std::string Sanitise(absl::string_view name) {
  std::string out;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ByteBuffer>> ShmAllocator::Allocate(
    absl::string_view name, int64_t bytes) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("buffer '", name, "': bytes must be >= 1, got ", bytes));
  }
  const std::string file =
      absl::StrCat(prefix_, ".", counter_.fetch_add(1), ".", Sanitise(name));
  absl::StatusOr<SharedMemorySegment> segment =
      SharedMemorySegment::Create(directory_, file, bytes);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<ByteBuffer>(new ShmBuffer(std::move(*segment)));
}

}  // namespace shardd::memory
