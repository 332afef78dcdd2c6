#ifndef SHARDD_DAEMON_RECOVERY_SHARD_MEMORY_H_
#define SHARDD_DAEMON_RECOVERY_SHARD_MEMORY_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shardd::recovery {

// How the shard stream and checkpoint code reach a shard's bytes, which may
// be in memory the host cannot address (a GPU's): the stream writer and the
// checkpoint writer read sections through it, the assembler and the
// checkpoint reader write them through it. Host() is plain memory, read and
// written in place. Implementations are thread-safe.
class ShardMemory {
 public:
  virtual ~ShardMemory() = default;

  // True when section pointers can be dereferenced by the host (then the
  // code reads and checksums them in place, without a copy).
  virtual bool host_addressable() const = 0;
  // n bytes at shard memory `src` -> host `dst`, and back.
  virtual absl::Status Read(uint8_t* host_dst, const uint8_t* src,
                            int64_t n) const = 0;
  virtual absl::Status Write(uint8_t* dst, const uint8_t* host_src,
                             int64_t n) const = 0;

  static const ShardMemory& Host();
};

// CRC-32C of n bytes of shard memory, extending `crc`: in place for host
// memory, through a bounded host buffer otherwise.
absl::StatusOr<uint32_t> ShardCrc32cExtend(const ShardMemory& memory,
                                           uint32_t crc, const uint8_t* data,
                                           int64_t n);

}  // namespace shardd::recovery

#endif  // SHARDD_DAEMON_RECOVERY_SHARD_MEMORY_H_
