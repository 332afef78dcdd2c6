#ifndef SHARDD_DAEMON_STATE_RESHARD_MAP_H_
#define SHARDD_DAEMON_STATE_RESHARD_MAP_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "daemon/core/unit_layout.h"

namespace shardd::state {

// One contiguous copy from a saved shard into a new shard.
struct RangePiece {
  int64_t source_shard = 0;   // Index into the saved layout's shards.
  int64_t source_offset = 0;  // Elements from the saved shard's start.
  int64_t dest_offset = 0;    // Elements from the new shard's start.
  int64_t numel = 0;
};

// Maps the elements a rank owns under a new layout (another F) to the
// saved shards that hold them. A unit's flat buffer is the same sequence
// of real elements whatever F (tensors back to back; only the padding at
// the end and the boundaries change: core::UnitLayout), so a new shard's
// real elements are the intersections of its flat range with the saved
// shards' ranges. Padding is never read: it is zero on both sides.
//
// Pure; thread-safe.
class ReshardMap {
 public:
  // The pieces that fill dest's real elements [dest.offset, dest.end()),
  // in ascending dest_offset, from `saved` (the saved layout's shards, in
  // index order). INVALID_ARGUMENT when the saved shards do not cover the
  // range exactly once (another model, or a corrupt layout).
  static absl::StatusOr<std::vector<RangePiece>> Map(
      const std::vector<core::ShardRange>& saved, const core::ShardRange& dest);
};

}  // namespace shardd::state

#endif  // SHARDD_DAEMON_STATE_RESHARD_MAP_H_
