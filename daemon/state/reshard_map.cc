#include "daemon/state/reshard_map.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardd::state {

absl::StatusOr<std::vector<RangePiece>> ReshardMap::Map(
    const std::vector<core::ShardRange>& saved, const core::ShardRange& dest) {
  std::vector<RangePiece> pieces;
  int64_t covered = 0;
  for (size_t i = 0; i < saved.size(); ++i) {
    const int64_t lo = std::max(saved[i].offset, dest.offset);
    const int64_t hi = std::min(saved[i].end(), dest.end());
    if (lo >= hi) continue;
    pieces.push_back(RangePiece{.source_shard = static_cast<int64_t>(i),
                                .source_offset = lo - saved[i].offset,
                                .dest_offset = lo - dest.offset,
                                .numel = hi - lo});
    covered += hi - lo;
  }
  std::sort(pieces.begin(), pieces.end(),
            [](const RangePiece& a, const RangePiece& b) {
              return a.dest_offset < b.dest_offset;
            });
  int64_t next = 0;
  for (const RangePiece& p : pieces) {
    if (p.dest_offset != next) break;
    next += p.numel;
  }
  if (covered != dest.numel || next != dest.numel) {
    return absl::InvalidArgumentError(
        absl::StrCat("the saved shards cover ", covered, " of the ", dest.numel,
                     " elements [", dest.offset, ", ", dest.end(),
                     ") once each: another layout than the saved one"));
  }
  return pieces;
}

}  // namespace shardd::state
