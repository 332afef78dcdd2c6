#ifndef SHARDD_DAEMON_MEMORY_BYTE_BUFFER_H_
#define SHARDD_DAEMON_MEMORY_BYTE_BUFFER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardd::memory {

// A block of memory the daemon owns: shard storage, gathered-parameter
// slots, gradient slots. Move-only owners; not thread-safe by themselves
// (the engine serialises access).
class ByteBuffer {
 public:
  virtual ~ByteBuffer() = default;
  virtual uint8_t* data() = 0;
  // Exactly the bytes asked for (what memory accounting counts).
  virtual int64_t size() const = 0;
  // Where a trainer maps it from (a shared-memory path), or empty when it is
  // private to the daemon.
  virtual const std::string& name() const = 0;
};

// Makes ByteBuffers. Buffers are zero-filled and pre-faulted: first touch
// of fresh memory is slow on the machines we run on, so it happens once,
// at registration, never on the step path.
class BufferAllocator {
 public:
  virtual ~BufferAllocator() = default;
  // `name` says what the buffer is for ("unit3.gathered"); an allocator may
  // use it to name a segment. RESOURCE_EXHAUSTED when memory runs out,
  // INVALID_ARGUMENT for bytes < 1.
  virtual absl::StatusOr<std::unique_ptr<ByteBuffer>> Allocate(
      absl::string_view name, int64_t bytes) = 0;
};

// Private, page-aligned heap memory (for shard storage, and for tests).
// Thread-safe.
class HeapAllocator : public BufferAllocator {
 public:
  absl::StatusOr<std::unique_ptr<ByteBuffer>> Allocate(absl::string_view name,
                                                       int64_t bytes) override;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_BYTE_BUFFER_H_
