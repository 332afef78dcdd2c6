#ifndef SHARDD_DAEMON_RECOVERY_TESTING_GUARDED_SHARD_MEMORY_H_
#define SHARDD_DAEMON_RECOVERY_TESTING_GUARDED_SHARD_MEMORY_H_

#include <atomic>
#include <cstdint>

#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/recovery/shard_memory.h"

namespace shardd::recovery::testing {

// The recovery code's view of a memory::testing::GuardedArena: shard memory the
// host cannot address, read and written through the arena's backing aliases (as
// a GPU runtime's copies would); a pointer outside the arena is
// INVALID_ARGUMENT. Counts its calls. Thread-safe; borrows the arena.
class GuardedShardMemory : public recovery::ShardMemory {
 public:
  explicit GuardedShardMemory(memory::testing::GuardedArena& arena)
      : arena_(arena) {}

  bool host_addressable() const override { return false; }
  absl::Status Read(uint8_t* host_dst, const uint8_t* src,
                    int64_t n) const override;
  absl::Status Write(uint8_t* dst, const uint8_t* host_src,
                     int64_t n) const override;

  int64_t reads() const { return reads_.load(); }
  int64_t writes() const { return writes_.load(); }

 private:
  memory::testing::GuardedArena& arena_;
  mutable std::atomic<int64_t> reads_{0};
  mutable std::atomic<int64_t> writes_{0};
};

}  // namespace shardd::recovery::testing

#endif  // SHARDD_DAEMON_RECOVERY_TESTING_GUARDED_SHARD_MEMORY_H_
