#include "daemon/core/unit_layout.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace shardd::core {
namespace {

using ::testing::TestWithParam;

UnitSpec MakeUnit(std::vector<std::vector<int64_t>> shapes,
                  DType dtype = DType::kFloat32) {
  UnitSpec unit{"layer0", {}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    unit.tensors.push_back(
        TensorSpec{"t" + std::to_string(i), std::move(shapes[i]), dtype});
  }
  return unit;
}

void ExpectRejected(const absl::StatusOr<UnitLayout>& layout,
                    absl::string_view field) {
  ASSERT_FALSE(layout.ok());
  EXPECT_EQ(layout.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(layout.status().message().find(std::string(field)),
            std::string::npos)
      << "message '" << layout.status().message() << "' does not name '"
      << field << "'";
}

// Shards tile [0, padded_numel) in order with no gaps or overlaps.
void ExpectShardsTile(const UnitLayout& layout) {
  int64_t next = 0;
  for (const ShardRange& s : layout.shards()) {
    EXPECT_EQ(s.offset, next);
    EXPECT_GE(s.numel, 0);
    EXPECT_GE(s.padding, 0);
    next = s.offset + s.stored();
  }
  EXPECT_EQ(next, layout.padded_numel());
  int64_t real = 0;
  for (const ShardRange& s : layout.shards()) real += s.numel;
  EXPECT_EQ(real, layout.numel());
}

TEST(UnitLayoutTest, FlattensTensorsInOrderWithContiguousViews) {
  auto layout = UnitLayout::Create(MakeUnit({{3, 4}, {4}, {}}), 1);
  ASSERT_TRUE(layout.ok()) << layout.status();
  ASSERT_EQ(layout->tensors().size(), 3u);
  EXPECT_EQ(layout->tensors()[0].offset, 0);
  EXPECT_EQ(layout->tensors()[0].numel, 12);
  EXPECT_EQ(layout->tensors()[1].offset, 12);
  EXPECT_EQ(layout->tensors()[1].numel, 4);
  EXPECT_EQ(layout->tensors()[2].offset, 16);
  EXPECT_EQ(layout->tensors()[2].numel, 1);  // A scalar.
  EXPECT_EQ(layout->tensors()[0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(layout->numel(), 17);
}

TEST(UnitLayoutTest, ShardingFactorOneIsOneUnpaddedShard) {
  auto layout = UnitLayout::Create(MakeUnit({{7}, {5}}), 1);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->padding_elements(), 0);
  ASSERT_EQ(layout->shards().size(), 1u);
  EXPECT_EQ(layout->shard(0).offset, 0);
  EXPECT_EQ(layout->shard(0).numel, 12);
  EXPECT_EQ(layout->shard(0).padding, 0);
}

TEST(UnitLayoutTest, PadsAtTheEndToAMultipleOfTheShardingFactor) {
  // 10 elements over F = 4: shards of 3, the last holds 1 real + 2 padding.
  auto layout = UnitLayout::Create(MakeUnit({{2, 5}}), 4);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->padding_elements(), 2);
  EXPECT_EQ(layout->padded_numel(), 12);
  EXPECT_EQ(layout->padded_bytes(), 48);
  EXPECT_TRUE(layout->even_shards());
  EXPECT_EQ(layout->shard(2).offset, 6);
  EXPECT_EQ(layout->shard(2).numel, 3);
  EXPECT_EQ(layout->shard(2).padding, 0);
  EXPECT_EQ(layout->shard(3).offset, 9);
  EXPECT_EQ(layout->shard(3).numel, 1);
  EXPECT_EQ(layout->shard(3).padding, 2);
  ExpectShardsTile(*layout);
}

TEST(UnitLayoutTest, NoPaddingWhenTheShardingFactorDivides) {
  auto layout = UnitLayout::Create(MakeUnit({{8}, {4}}), 4);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->padding_elements(), 0);
  for (const ShardRange& s : layout->shards()) EXPECT_EQ(s.numel, 3);
}

TEST(UnitLayoutTest, ShardingFactorAboveElementCountLeavesPaddingOnlyShards) {
  auto layout = UnitLayout::Create(MakeUnit({{3}}), 8);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->padding_elements(), 5);
  EXPECT_EQ(layout->shard(2).numel, 1);
  EXPECT_EQ(layout->shard(3).numel, 0);
  EXPECT_EQ(layout->shard(7).padding, 1);
  ExpectShardsTile(*layout);
}

TEST(UnitLayoutTest, BlockAlignmentCutsOnlyAtBlockBoundaries) {
  // Tensors of 10 and 6 elements, blocks of 4: boundaries at 0,4,8,10 and
  // 10,14,16. Ideal cuts for F = 2: 8 -> exactly a boundary.
  AlignmentSpec blocks{AlignmentMode::kBlock, 4};
  auto layout = UnitLayout::Create(MakeUnit({{10}, {6}}), 2, blocks);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->padding_elements(), 0);
  EXPECT_EQ(layout->shard(0).numel, 8);
  EXPECT_EQ(layout->shard(1).numel, 8);
  // F = 3: ideal cuts 5.33 -> 5 (nearest boundary 4) and 10.67 -> 10.
  auto three = UnitLayout::Create(MakeUnit({{10}, {6}}), 3, blocks);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->shard(0).numel, 4);
  EXPECT_EQ(three->shard(1).numel, 6);
  EXPECT_EQ(three->shard(2).numel, 6);
  EXPECT_FALSE(three->even_shards());
  EXPECT_EQ(three->shard_imbalance_elements(), 2);
  ExpectShardsTile(*three);
}

TEST(UnitLayoutTest, WholeTensorAlignmentNeverSplitsATensor) {
  auto layout = UnitLayout::Create(MakeUnit({{64, 64}, {64}, {64, 64}, {64}}),
                                   2, {AlignmentMode::kWholeTensor, 0});
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->padding_elements(), 0);
  EXPECT_EQ(layout->shard(0).numel, 64 * 64 + 64);
  EXPECT_EQ(layout->shard(1).numel, 64 * 64 + 64);
  ExpectShardsTile(*layout);
}

TEST(UnitLayoutTest, WholeTensorAlignmentWithFewerTensorsThanShards) {
  auto layout = UnitLayout::Create(MakeUnit({{100}}), 4,
                                   {AlignmentMode::kWholeTensor, 0});
  ASSERT_TRUE(layout.ok());
  int64_t nonempty = 0;
  for (const ShardRange& s : layout->shards()) nonempty += s.numel > 0;
  EXPECT_EQ(nonempty, 1);
  ExpectShardsTile(*layout);
}

struct RandomCase {
  AlignmentMode mode;
  int seed;
};

class UnitLayoutPropertyTest : public TestWithParam<RandomCase> {};

// For random units, F and block sizes: shards tile the buffer, every cut is
// a block boundary, and each shard is within one block of total/F.
TEST_P(UnitLayoutPropertyTest, UnevenShardsAreBlockAlignedAndBalanced) {
  std::mt19937_64 rng(GetParam().seed);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<std::vector<int64_t>> shapes;
    const int tensors = 1 + rng() % 6;
    for (int t = 0; t < tensors; ++t) {
      std::vector<int64_t> shape;
      const int dims = rng() % 3;
      for (int d = 0; d < dims; ++d) shape.push_back(1 + rng() % 40);
      shapes.push_back(shape);
    }
    const int64_t f = 1 + rng() % 8;
    const int64_t block = 1 + rng() % 64;
    AlignmentSpec alignment{
        GetParam().mode, GetParam().mode == AlignmentMode::kBlock ? block : 0};
    auto layout = UnitLayout::Create(MakeUnit(shapes), f, alignment);
    ASSERT_TRUE(layout.ok()) << layout.status();
    ExpectShardsTile(*layout);
    std::set<int64_t> boundaries;
    int64_t largest_block = 0;
    for (const TensorView& t : layout->tensors()) {
      const int64_t step = alignment.mode == AlignmentMode::kBlock
                               ? alignment.block_elements
                               : t.numel;
      for (int64_t b = 0; b < t.numel; b += step) {
        boundaries.insert(t.offset + b);
        largest_block = std::max(largest_block, std::min(step, t.numel - b));
      }
    }
    boundaries.insert(layout->numel());
    const double ideal = static_cast<double>(layout->numel()) / f;
    for (const ShardRange& s : layout->shards()) {
      EXPECT_EQ(s.padding, 0);
      EXPECT_TRUE(boundaries.count(s.offset)) << "cut at " << s.offset;
      EXPECT_LE(std::abs(static_cast<double>(s.numel) - ideal),
                static_cast<double>(largest_block))
          << "trial " << trial;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Modes, UnitLayoutPropertyTest,
    ::testing::Values(RandomCase{AlignmentMode::kBlock, 1},
                      RandomCase{AlignmentMode::kBlock, 2},
                      RandomCase{AlignmentMode::kWholeTensor, 3}));

TEST(UnitLayoutTest, ElementShardsAreEvenForRandomUnits) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = 1 + rng() % 1000;
    const int64_t f = 1 + rng() % 16;
    auto layout = UnitLayout::Create(MakeUnit({{n}}), f);
    ASSERT_TRUE(layout.ok());
    ExpectShardsTile(*layout);
    EXPECT_TRUE(layout->even_shards());
    EXPECT_LT(layout->padding_elements(), f);
    EXPECT_EQ(layout->padded_numel() % f, 0);
  }
}

TEST(UnitLayoutTest, KeepsLowPrecisionDtype) {
  auto layout = UnitLayout::Create(MakeUnit({{5}}, DType::kBFloat16), 2);
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(layout->dtype(), DType::kBFloat16);
  EXPECT_EQ(layout->padded_bytes(), 12);
}

TEST(UnitLayoutTest, RejectsEmptyUnit) {
  ExpectRejected(UnitLayout::Create(UnitSpec{"u", {}}, 2), "tensors");
}

TEST(UnitLayoutTest, RejectsEmptyUnitName) {
  UnitSpec unit = MakeUnit({{2}});
  unit.name = "";
  ExpectRejected(UnitLayout::Create(unit, 1), "unit.name");
}

TEST(UnitLayoutTest, RejectsZeroSizedDim) {
  ExpectRejected(UnitLayout::Create(MakeUnit({{4}, {3, 0}}), 2),
                 "tensor[1] 't1' shape[1]");
}

TEST(UnitLayoutTest, RejectsNegativeDim) {
  ExpectRejected(UnitLayout::Create(MakeUnit({{-4}}), 2), "shape[0]");
}

TEST(UnitLayoutTest, RejectsUnsupportedDtype) {
  UnitSpec unit = MakeUnit({{4}});
  unit.tensors[0].dtype = static_cast<DType>(9);
  ExpectRejected(UnitLayout::Create(unit, 2), "dtype");
}

TEST(UnitLayoutTest, RejectsMixedDtypesInOneUnit) {
  UnitSpec unit = MakeUnit({{4}, {4}});
  unit.tensors[1].dtype = DType::kFloat16;
  ExpectRejected(UnitLayout::Create(unit, 2), "tensor[1] 't1' dtype");
}

TEST(UnitLayoutTest, RejectsDuplicateAndEmptyTensorNames) {
  UnitSpec unit = MakeUnit({{4}, {4}});
  unit.tensors[1].name = "t0";
  ExpectRejected(UnitLayout::Create(unit, 2), "duplicate");
  unit.tensors[1].name = "";
  ExpectRejected(UnitLayout::Create(unit, 2), "tensor[1].name");
}

TEST(UnitLayoutTest, RejectsNonPositiveShardingFactor) {
  ExpectRejected(UnitLayout::Create(MakeUnit({{4}}), 0), "sharding_factor");
  ExpectRejected(UnitLayout::Create(MakeUnit({{4}}), -2), "sharding_factor");
}

TEST(UnitLayoutTest, RejectsZeroBlockSize) {
  ExpectRejected(
      UnitLayout::Create(MakeUnit({{4}}), 2, {AlignmentMode::kBlock, 0}),
      "block_elements");
}

TEST(UnitLayoutTest, RejectsUnknownAlignmentMode) {
  ExpectRejected(UnitLayout::Create(MakeUnit({{4}}), 2,
                                    {static_cast<AlignmentMode>(42), 0}),
                 "alignment.mode");
}

TEST(UnitLayoutTest, RejectsShapesOverflowing64Bits) {
  const int64_t big = int64_t{1} << 40;
  // One tensor whose dims multiply past 2^63.
  ExpectRejected(UnitLayout::Create(MakeUnit({{big, big}}), 2), "overflows");
  // Elements that fit, but whose fp32 bytes would not.
  ExpectRejected(UnitLayout::Create(MakeUnit({{int64_t{1} << 62}}), 2),
                 "overflows");
  // Tensors that fit alone but not together.
  ExpectRejected(
      UnitLayout::Create(MakeUnit({{int64_t{1} << 60}, {int64_t{1} << 60}}), 2),
      "tensor[1]");
}

TEST(UnitLayoutTest, AcceptsLargestRepresentableUnit) {
  // 2^60 elements: the fp32 master copy is 2^62 bytes, still representable.
  auto layout = UnitLayout::Create(MakeUnit({{int64_t{1} << 60}}), 3);
  ASSERT_TRUE(layout.ok()) << layout.status();
  EXPECT_EQ(layout->padded_numel() % 3, 0);
}

}  // namespace
}  // namespace shardd::core
