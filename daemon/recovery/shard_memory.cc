#include "daemon/recovery/shard_memory.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "daemon/core/crc32c.h"

namespace shardd::recovery {
namespace {

class HostShardMemory : public ShardMemory {
 public:
  bool host_addressable() const override { return true; }
  absl::Status Read(uint8_t* host_dst, const uint8_t* src,
                    int64_t n) const override {
    if (n > 0) std::memcpy(host_dst, src, static_cast<size_t>(n));
    return absl::OkStatus();
  }
  absl::Status Write(uint8_t* dst, const uint8_t* host_src,
                     int64_t n) const override {
    if (n > 0) std::memcpy(dst, host_src, static_cast<size_t>(n));
    return absl::OkStatus();
  }
};

}  // namespace

const ShardMemory& ShardMemory::Host() {
  static const HostShardMemory* const kHost = new HostShardMemory();
  return *kHost;
}

absl::StatusOr<uint32_t> ShardCrc32cExtend(const ShardMemory& memory,
                                           uint32_t crc, const uint8_t* data,
                                           int64_t n) {
  if (n <= 0) return crc;
  if (memory.host_addressable()) {
    return core::Crc32cExtend(crc, data, static_cast<size_t>(n));
  }
  constexpr int64_t kBounce = int64_t{4} << 20;
  std::vector<uint8_t> bounce(static_cast<size_t>(std::min(n, kBounce)));
  for (int64_t done = 0; done < n; done += kBounce) {
    const int64_t len = std::min(kBounce, n - done);
    if (absl::Status s = memory.Read(bounce.data(), data + done, len);
        !s.ok()) {
      return s;
    }
    crc = core::Crc32cExtend(crc, bounce.data(), static_cast<size_t>(len));
  }
  return crc;
}

}  // namespace shardd::recovery
