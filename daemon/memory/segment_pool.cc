#include "daemon/memory/segment_pool.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "daemon/core/deadline_waker.h"

namespace shardd::memory {

absl::StatusOr<std::unique_ptr<SegmentPool>> SegmentPool::Create(
    absl::string_view directory, absl::string_view name, int64_t slots,
    int64_t slot_bytes) {
  if (slots < 1 || slot_bytes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment pool '", name, "': slots (", slots,
                     ") and slot_bytes (", slot_bytes, ") must be >= 1"));
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(slots, slot_bytes, &total)) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment pool '", name, "': ", slots, " x ", slot_bytes,
                     " bytes overflows"));
  }
  absl::StatusOr<SharedMemorySegment> segment =
      SharedMemorySegment::Create(directory, name, total);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<SegmentPool>(
      new SegmentPool(*std::move(segment), slots, slot_bytes));
}

SegmentSlot SegmentPool::SlotAt(int64_t index, bool newly_acquired) const {
  SegmentSlot slot;
  slot.index = index;
  slot.byte_offset = index * slot_bytes_;
  slot.data = static_cast<char*>(segment_.mutable_data()) + slot.byte_offset;
  slot.newly_acquired = newly_acquired;
  return slot;
}

bool SegmentPool::HasFreeOrClosed() const {
  if (closed_) return true;
  for (int64_t holder : holder_) {
    if (holder < 0) return true;
  }
  return false;
}

absl::StatusOr<SegmentSlot> SegmentPool::Acquire(int64_t unit,
                                                 MonoTime deadline) {
  if (unit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("unit must be >= 0, got ", unit));
  }
  absl::MutexLock lock(&mutex_);
  for (size_t i = 0; i < holder_.size(); ++i) {
    if (holder_[i] == unit) return SlotAt(i, /*newly_acquired=*/false);
  }
  AwaitUntil(&mutex_, absl::Condition(this, &SegmentPool::HasFreeOrClosed),
             deadline);
  if (closed_) {
    return absl::AbortedError(
        absl::StrCat("segment pool '", segment_.path(), "' is closed"));
  }
  // A unit may have been handed a slot by another thread while we waited.
  for (size_t i = 0; i < holder_.size(); ++i) {
    if (holder_[i] == unit) return SlotAt(i, /*newly_acquired=*/false);
  }
  for (size_t i = 0; i < holder_.size(); ++i) {
    if (holder_[i] < 0) {
      holder_[i] = unit;
      return SlotAt(i, /*newly_acquired=*/true);
    }
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "all ", holder_.size(), " gathered-unit slots are held (units ",
      absl::StrJoin(holder_, ", "), "); release one before gathering unit ",
      unit));
}

bool SegmentPool::Release(int64_t unit) {
  absl::MutexLock lock(&mutex_);
  for (int64_t& holder : holder_) {
    if (holder == unit && unit >= 0) {
      holder = -1;
      return true;
    }
  }
  return false;
}

void SegmentPool::Close() {
  absl::MutexLock lock(&mutex_);
  closed_ = true;
}

std::vector<int64_t> SegmentPool::Holders() const {
  absl::MutexLock lock(&mutex_);
  return holder_;
}

}  // namespace shardd::memory
