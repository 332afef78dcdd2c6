#ifndef SHARDD_DAEMON_MEMORY_SEGMENT_POOL_H_
#define SHARDD_DAEMON_MEMORY_SEGMENT_POOL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"
#include "daemon/memory/shared_memory_segment.h"

namespace shardd::memory {

// A slot handed to a unit.
struct SegmentSlot {
  int64_t index = 0;
  // Where the slot lies in the pool's segment (what a SharedMemoryRef's
  // byte_offset says) and its mapped address in this process.
  int64_t byte_offset = 0;
  void* data = nullptr;
  // False when the unit already held this slot (Gather of a gathered unit).
  bool newly_acquired = true;
};

// K fixed, equally sized slots in one shared-memory segment (the memory
// plan's gathered-parameter slots), handed out to units by index.
//
// One segment of exactly K * slot_bytes (the plan's figure), created and
// pre-faulted once: the trainer maps one file once and finds each unit at a
// byte offset. Acquire(unit) returns the slot the unit already holds, else a
// free one, waiting until `deadline` for a Release; when all K stay held it
// is RESOURCE_EXHAUSTED naming the holders (the Gather RPC's code for "K
// units gathered and not released"). Close() wakes every waiter with ABORTED
// (an aborted epoch) and makes later Acquires ABORTED; slots held stay held
// until released.
//
// Thread-safe. Owns its segment; slot memory stays valid for the pool's life.
class SegmentPool {
 public:
  // slots >= 1, slot_bytes >= 1; errors as SharedMemorySegment::Create's, or
  // INVALID_ARGUMENT.
  static absl::StatusOr<std::unique_ptr<SegmentPool>> Create(
      absl::string_view directory, absl::string_view name, int64_t slots,
      int64_t slot_bytes);

  // unit >= 0 (INVALID_ARGUMENT otherwise).
  absl::StatusOr<SegmentSlot> Acquire(int64_t unit, MonoTime deadline);
  // Returns false when the unit held no slot (idempotent, like Release RPC).
  bool Release(int64_t unit);
  void Close();

  // Units holding a slot, by slot index (-1: free).
  std::vector<int64_t> Holders() const;
  int64_t slots() const { return static_cast<int64_t>(holder_.size()); }
  int64_t slot_bytes() const { return slot_bytes_; }
  const SharedMemorySegment& segment() const { return segment_; }

 private:
  SegmentPool(SharedMemorySegment segment, int64_t slots, int64_t slot_bytes)
      : segment_(std::move(segment)),
        slot_bytes_(slot_bytes),
        holder_(slots, -1) {}
  SegmentSlot SlotAt(int64_t index, bool newly_acquired) const;
  bool HasFreeOrClosed() const ABSL_SHARED_LOCKS_REQUIRED(mutex_);

  const SharedMemorySegment segment_;
  const int64_t slot_bytes_;
  mutable absl::Mutex mutex_;
  std::vector<int64_t> holder_ ABSL_GUARDED_BY(mutex_);
  bool closed_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace shardd::memory

#endif  // SHARDD_DAEMON_MEMORY_SEGMENT_POOL_H_
