#include "daemon/recovery/testing/guarded_shard_memory.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace shardd::recovery::testing {

absl::Status GuardedShardMemory::Read(uint8_t* host_dst, const uint8_t* src,
                                      int64_t n) const {
  if (!arena_.Contains(src, n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("read of ", n, " B: not device memory"));
  }
  if (n > 0) std::memcpy(host_dst, arena_.Alias(src), static_cast<size_t>(n));
  reads_.fetch_add(1);
  return absl::OkStatus();
}

absl::Status GuardedShardMemory::Write(uint8_t* dst, const uint8_t* host_src,
                                       int64_t n) const {
  if (!arena_.Contains(dst, n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("write of ", n, " B: not device memory"));
  }
  if (n > 0) std::memcpy(arena_.Alias(dst), host_src, static_cast<size_t>(n));
  writes_.fetch_add(1);
  return absl::OkStatus();
}

}  // namespace shardd::recovery::testing
