#ifndef SHARDD_DAEMON_NODE_TESTING_GUARDED_SHARD_MEMORY_H_
#define SHARDD_DAEMON_NODE_TESTING_GUARDED_SHARD_MEMORY_H_

#include <atomic>
#include <cstdint>

#include "daemon/node/testing/guarded_arena.h"
#include "daemon/recovery/shard_memory.h"

namespace shardd::node::testing {

// The recovery code's view of a GuardedArena: shard memory the host cannot
// address, read and written through the arena's backing aliases (as a GPU
// runtime's copies would); a pointer outside the arena is INVALID_ARGUMENT.
// Counts its calls. Thread-safe; borrows the arena.
class GuardedShardMemory : public recovery::ShardMemory {
 public:
  explicit GuardedShardMemory(GuardedArena& arena) : arena_(arena) {}

  bool host_addressable() const override { return false; }
  absl::Status Read(uint8_t* host_dst, const uint8_t* src,
                    int64_t n) const override;
  absl::Status Write(uint8_t* dst, const uint8_t* host_src,
                     int64_t n) const override;

  int64_t reads() const { return reads_.load(); }
  int64_t writes() const { return writes_.load(); }

 private:
  GuardedArena& arena_;
  mutable std::atomic<int64_t> reads_{0};
  mutable std::atomic<int64_t> writes_{0};
};

}  // namespace shardd::node::testing

#endif  // SHARDD_DAEMON_NODE_TESTING_GUARDED_SHARD_MEMORY_H_
