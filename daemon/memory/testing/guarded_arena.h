#ifndef SHARDD_DAEMON_MEMORY_TESTING_GUARDED_ARENA_H_
#define SHARDD_DAEMON_MEMORY_TESTING_GUARDED_ARENA_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "daemon/memory/byte_buffer.h"

namespace shardd::memory::testing {

// Stands in for GPU memory in CPU tests of the device path: memory whose
// addresses the host cannot dereference. One memfd is mapped twice: the
// "device" mapping, which Allocate hands out, is PROT_NONE (any direct
// load or store through it is a SIGSEGV), and the backing mapping is
// read-write. Only code that translates a device address (Alias), as a GPU
// runtime's copies and kernels would, reaches the bytes.
//
// Allocation is a bump pointer over a fixed, sparse capacity; memory is
// zero-filled (a fresh memfd) and returned to nothing until the arena goes.
// Thread-safe. The arena must outlive its buffers.
class GuardedArena : public memory::BufferAllocator {
 public:
  // RESOURCE_EXHAUSTED when the mappings cannot be made.
  static absl::StatusOr<std::unique_ptr<GuardedArena>> Create(
      int64_t capacity_bytes);
  ~GuardedArena() override;
  GuardedArena(const GuardedArena&) = delete;
  GuardedArena& operator=(const GuardedArena&) = delete;

  absl::StatusOr<std::unique_ptr<memory::ByteBuffer>> Allocate(
      absl::string_view name, int64_t bytes) override;

  // True when [p, p + bytes) lies inside the device mapping.
  bool Contains(const void* p, int64_t bytes) const;
  // The backing address of device address `p` (which must be Contained).
  void* Alias(const void* p) const;

 private:
  GuardedArena(uint8_t* device, uint8_t* backing, int64_t capacity);

  uint8_t* const device_;
  uint8_t* const backing_;
  const int64_t capacity_;
  absl::Mutex mu_;
  int64_t used_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardd::memory::testing

#endif  // SHARDD_DAEMON_MEMORY_TESTING_GUARDED_ARENA_H_
