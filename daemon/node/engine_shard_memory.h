#ifndef SHARDD_DAEMON_NODE_ENGINE_SHARD_MEMORY_H_
#define SHARDD_DAEMON_NODE_ENGINE_SHARD_MEMORY_H_

#include <cstdint>
#include <memory>

#include "daemon/node/engine_math.h"
#include "daemon/recovery/shard_memory.h"

namespace shardd::node {

// The recovery code's view of a step engine's memory: reads are the
// math's downloads, writes its uploads, and the memory is host-addressable
// exactly when the math's is not a device's. Thread-safe as the math;
// shares ownership of it.
class EngineShardMemory : public recovery::ShardMemory {
 public:
  explicit EngineShardMemory(std::shared_ptr<EngineMath> math)
      : math_(std::move(math)) {}

  bool host_addressable() const override { return !math_->device_memory(); }
  absl::Status Read(uint8_t* host_dst, const uint8_t* src,
                    int64_t n) const override {
    return math_->Download(host_dst, src, n);
  }
  absl::Status Write(uint8_t* dst, const uint8_t* host_src,
                     int64_t n) const override {
    return math_->Upload(dst, host_src, n);
  }

 private:
  const std::shared_ptr<EngineMath> math_;
};

}  // namespace shardd::node

#endif  // SHARDD_DAEMON_NODE_ENGINE_SHARD_MEMORY_H_
