#include "daemon/memory/byte_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardd::memory {
namespace {

constexpr int64_t kPage = 4096;

class HeapBuffer : public ByteBuffer {
 public:
  HeapBuffer(uint8_t* data, int64_t size) : data_(data), size_(size) {}
  ~HeapBuffer() override { std::free(data_); }
  HeapBuffer(const HeapBuffer&) = delete;
  HeapBuffer& operator=(const HeapBuffer&) = delete;

  uint8_t* data() override { return data_; }
  int64_t size() const override { return size_; }
  const std::string& name() const override { return name_; }

 private:
  uint8_t* const data_;
  const int64_t size_;
  const std::string name_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<ByteBuffer>> HeapAllocator::Allocate(
    absl::string_view name, int64_t bytes) {
  if (bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": buffer size must be >= 1 byte, got ", bytes));
  }
  const int64_t rounded = (bytes + kPage - 1) / kPage * kPage;
  void* p = std::aligned_alloc(kPage, static_cast<size_t>(rounded));
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat(name, ": cannot allocate ", bytes, " bytes"));
  }
  // Zero-fill touches every page now (pre-faulting), not on the step path.
  std::memset(p, 0, static_cast<size_t>(rounded));
  return std::make_unique<HeapBuffer>(static_cast<uint8_t*>(p), bytes);
}

}  // namespace shardd::memory
