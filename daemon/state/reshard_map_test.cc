#include "daemon/state/reshard_map.h"

#include <vector>

#include "daemon/core/unit_layout.h"
#include "gtest/gtest.h"

namespace shardd::state {
namespace {

core::UnitLayout Layout(int64_t f, core::AlignmentSpec alignment = {}) {
  core::UnitSpec spec{"u",
                      {{"w", {7, 5}, core::DType::kFloat32},
                       {"b", {5}, core::DType::kFloat32}}};
  absl::StatusOr<core::UnitLayout> layout =
      core::UnitLayout::Create(spec, f, alignment);
  EXPECT_TRUE(layout.ok()) << layout.status();
  return *layout;
}

// Element k of the flat buffer holds k in every shard that stores it; a
// new shard filled through the map must then hold its own flat indices.
void ExpectExactReshard(const core::UnitLayout& saved,
                        const core::UnitLayout& now) {
  for (int64_t i = 0; i < now.sharding_factor(); ++i) {
    const core::ShardRange& dest = now.shard(i);
    absl::StatusOr<std::vector<RangePiece>> pieces =
        ReshardMap::Map(saved.shards(), dest);
    ASSERT_TRUE(pieces.ok()) << pieces.status();
    std::vector<int64_t> filled(dest.stored(), -1);
    for (const RangePiece& p : *pieces) {
      const core::ShardRange& src = saved.shard(p.source_shard);
      ASSERT_LE(p.source_offset + p.numel, src.numel);
      for (int64_t k = 0; k < p.numel; ++k) {
        filled[p.dest_offset + k] = src.offset + p.source_offset + k;
      }
    }
    for (int64_t k = 0; k < dest.numel; ++k) {
      EXPECT_EQ(filled[k], dest.offset + k) << "shard " << i << " elem " << k;
    }
    for (int64_t k = dest.numel; k < dest.stored(); ++k) {
      EXPECT_EQ(filled[k], -1) << "padding is never read";
    }
  }
}

TEST(ReshardMapTest, SameLayoutIsOneWholePiecePerShard) {
  const core::UnitLayout l = Layout(2);
  for (int64_t i = 0; i < 2; ++i) {
    auto pieces = ReshardMap::Map(l.shards(), l.shard(i));
    ASSERT_TRUE(pieces.ok());
    ASSERT_EQ(pieces->size(), 1u);
    EXPECT_EQ((*pieces)[0].source_shard, i);
    EXPECT_EQ((*pieces)[0].numel, l.shard(i).numel);
  }
}

TEST(ReshardMapTest, FewerShardsReadFromSeveralSavedShards) {
  ExpectExactReshard(Layout(4), Layout(2));
  ExpectExactReshard(Layout(4), Layout(1));
  ExpectExactReshard(Layout(3), Layout(2));
}

TEST(ReshardMapTest, MoreShardsReadSlicesOfSavedShards) {
  ExpectExactReshard(Layout(2), Layout(4));
  ExpectExactReshard(Layout(1), Layout(8));
  ExpectExactReshard(Layout(3), Layout(7));
}

TEST(ReshardMapTest, BlockAlignedLayoutsMapExactly) {
  const core::AlignmentSpec block{core::AlignmentMode::kBlock, 4};
  ExpectExactReshard(Layout(2, block), Layout(4, block));
  ExpectExactReshard(Layout(4), Layout(3, block));
}

TEST(ReshardMapTest, RejectsSavedShardsThatDoNotCover) {
  const core::UnitLayout l = Layout(2);
  std::vector<core::ShardRange> partial = {l.shard(0)};
  auto pieces = ReshardMap::Map(partial, core::ShardRange{0, 40, 0});
  EXPECT_EQ(pieces.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<core::ShardRange> twice = {l.shard(0), l.shard(0), l.shard(1)};
  EXPECT_FALSE(ReshardMap::Map(twice, core::ShardRange{0, 40, 0}).ok());
}

}  // namespace
}  // namespace shardd::state
