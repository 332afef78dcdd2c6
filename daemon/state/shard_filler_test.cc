#include "daemon/state/shard_filler.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "daemon/memory/testing/guarded_arena.h"
#include "daemon/node/host_engine_math.h"
#include "daemon/node/testing/guarded_engine_math.h"
#include "gtest/gtest.h"

namespace shardd::state {
namespace {

// A "file" of floats 0, 1, 2, ...: a piece at source element `from` reads
// from + done, from + done + 1, ...; counts each read's length.
struct Source {
  std::vector<int64_t> reads;
  ShardFiller::Piece Piece(int64_t from, int64_t dest, int64_t numel) {
    return ShardFiller::Piece{
        dest, numel, [this, from](int64_t done, int64_t count, float* out) {
          reads.push_back(count);
          for (int64_t i = 0; i < count; ++i) {
            out[i] = static_cast<float>(from + done + i);
          }
          return absl::OkStatus();
        }};
  }
};

std::vector<float> Expected(int64_t numel) {
  // Pieces below: [2, 6) from 100, [10, 30) from 200; the rest zero.
  std::vector<float> want(numel, 0.0f);
  for (int i = 0; i < 4; ++i) want[2 + i] = 100.0f + i;
  for (int i = 0; i < 20; ++i) want[10 + i] = 200.0f + i;
  return want;
}

TEST(ShardFillerTest, HostSectionIsReadInPlaceAndTheRestZeroed) {
  node::HostEngineMath math;
  std::vector<float> section(32, -1.0f);  // Garbage that must go.
  Source source;
  ShardFiller filler(math, /*staging_bytes=*/16);
  ASSERT_TRUE(filler
                  .Fill(reinterpret_cast<uint8_t*>(section.data()), 32,
                        {source.Piece(200, 10, 20), source.Piece(100, 2, 4)},
                        /*zero_rest=*/true)
                  .ok());
  EXPECT_EQ(section, Expected(32));
  // Whole pieces, straight into the section: no staging.
  EXPECT_EQ(source.reads, (std::vector<int64_t>{4, 20}));
  EXPECT_EQ(filler.staging_bytes_used(), 0);
}

TEST(ShardFillerTest, DeviceSectionGoesThroughOneBoundedStagingBuffer) {
  auto arena = memory::testing::GuardedArena::Create(1 << 20);
  ASSERT_TRUE(arena.ok()) << arena.status();
  std::shared_ptr<memory::testing::GuardedArena> shared = *std::move(arena);
  node::testing::GuardedEngineMath math(shared);
  auto buffer = shared->Allocate("section", 32 * 4);
  ASSERT_TRUE(buffer.ok());
  uint8_t* device = (*buffer)->data();
  // Garbage first (through the math: the host cannot touch it).
  std::vector<float> garbage(32, -1.0f);
  ASSERT_TRUE(math.Upload(device, garbage.data(), 32 * 4).ok());
  Source source;
  ShardFiller filler(math, /*staging_bytes=*/32);  // 8 elements.
  ASSERT_TRUE(filler
                  .Fill(device, 32,
                        {source.Piece(100, 2, 4), source.Piece(200, 10, 20)},
                        /*zero_rest=*/true)
                  .ok());
  std::vector<float> got(32);
  ASSERT_TRUE(math.Download(got.data(), device, 32 * 4).ok());
  EXPECT_EQ(got, Expected(32));
  EXPECT_EQ(source.reads, (std::vector<int64_t>{4, 8, 8, 4}));
  EXPECT_EQ(filler.staging_bytes_used(), 32);
}

TEST(ShardFillerTest, WithoutZeroRestUncoveredElementsKeepTheirValues) {
  node::HostEngineMath math;
  std::vector<float> section(8, 7.0f);
  Source source;
  ShardFiller filler(math);
  ASSERT_TRUE(filler
                  .Fill(reinterpret_cast<uint8_t*>(section.data()), 8,
                        {source.Piece(0, 4, 2)}, /*zero_rest=*/false)
                  .ok());
  EXPECT_EQ(section, (std::vector<float>{7, 7, 7, 7, 0, 1, 7, 7}));
}

TEST(ShardFillerTest, RefusesOverlappingOrOutOfRangePieces) {
  node::HostEngineMath math;
  std::vector<float> section(8, 0.0f);
  Source source;
  ShardFiller filler(math);
  EXPECT_EQ(filler
                .Fill(reinterpret_cast<uint8_t*>(section.data()), 8,
                      {source.Piece(0, 0, 4), source.Piece(0, 3, 2)}, true)
                .code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(filler
                .Fill(reinterpret_cast<uint8_t*>(section.data()), 8,
                      {source.Piece(0, 6, 4)}, true)
                .code(),
            absl::StatusCode::kInternal);
}

TEST(ShardFillerTest, AReadErrorStopsTheFillWithItsStatus) {
  node::HostEngineMath math;
  std::vector<float> section(8, 0.0f);
  ShardFiller filler(math);
  ShardFiller::Piece bad{0, 4, [](int64_t, int64_t, float*) {
                           return absl::DataLossError("file.safetensors: cut");
                         }};
  const absl::Status s =
      filler.Fill(reinterpret_cast<uint8_t*>(section.data()), 8, {bad}, true);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "file.safetensors: cut");
}

}  // namespace
}  // namespace shardd::state
