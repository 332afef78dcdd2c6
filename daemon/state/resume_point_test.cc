#include "daemon/state/resume_point.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/recovery/shard_checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::state {
namespace {

using ::testing::HasSubstr;

TEST(ResumePointChooserTest, ChoosesLatestStepEveryRankHolds) {
  auto p = ResumePointChooser::Choose(
      {{0, {3, 6, 9}}, {1, {3, 6}}, {2, {9, 6, 3}}, {3, {6, 9, 12}}});
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 6);
  EXPECT_EQ(p->world_size, 4);
}

TEST(ResumePointChooserTest, NoCommonStepIsNotFound) {
  auto p = ResumePointChooser::Choose({{0, {3}}, {1, {6}}});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("all 2 ranks"));
  EXPECT_EQ(ResumePointChooser::Choose({}).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ResumePointChooser::Choose({{0, {3}}, {1, {}}}).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ResumePointChooserTest, MissingRankFolderIsNamed) {
  auto p = ResumePointChooser::Choose({{0, {3}}, {2, {3}}});
  EXPECT_EQ(p.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(p.status().message(), HasSubstr("rank 1 has no checkpoint"));
}

TEST(ResumePointChooserTest, CorruptFileFallsBackToOlderCommonStep) {
  std::vector<std::pair<int, int64_t>> checked;
  std::vector<std::string> problems;
  auto p = ResumePointChooser::ChooseVerified(
      {{0, {3, 6, 9}}, {1, {3, 6, 9}}},
      [&](int rank, int64_t step) {
        checked.push_back({rank, step});
        if (rank == 1 && step == 9) return absl::DataLossError("r1 s9 bad");
        return absl::OkStatus();
      },
      &problems);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->step, 6);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("r1 s9 bad"));
  // Rank 0's step 9 was checked once; step 6 once per rank.
  const std::vector<std::pair<int, int64_t>> want = {
      {0, 9}, {1, 9}, {0, 6}, {1, 6}};
  EXPECT_EQ(checked, want);
}

TEST(ResumePointChooserTest, EveryFileCorruptIsNotFound) {
  auto p = ResumePointChooser::ChooseVerified(
      {{0, {3}}, {1, {3}}},
      [](int, int64_t) { return absl::DataLossError("bad"); }, nullptr);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
}

TEST(ResumePointChooserTest, MissingDirectoryIsNotFound) {
  auto p =
      ResumePointChooser::ChooseFromDirectory("/nonexistent/ckpt", nullptr);
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(p.status().message(), HasSubstr("/nonexistent/ckpt"));
}

// Real checkpoint files: rank 1's newest one has a flipped byte, so the
// newest step both ranks hold intact is the older one; a rank folder
// without files makes every step unavailable.
TEST(ResumePointChooserTest, ChoosesFromRealFilesSkippingACorruptOne) {
  const std::string dir =
      absl::StrCat(std::getenv("TEST_TMPDIR"), "/ckpt-choose");
  std::filesystem::remove_all(dir);
  std::vector<uint8_t> bytes(4096, 7);
  for (int rank = 0; rank < 2; ++rank) {
    for (int64_t step : {3, 6}) {
      recovery::SectionSource source;
      source.section.set_unit(0);
      source.section.set_kind(v1::SHARD_SECTION_KIND_PARAMETERS);
      source.section.set_dtype(v1::DTYPE_FP32);
      source.section.set_numel(1024);
      source.section.set_byte_length(4096);
      source.data = bytes.data();
      v1::ShardHeader header;
      header.set_step(step);
      header.set_shard_index(rank);
      ASSERT_TRUE(
          recovery::WriteShardCheckpoint(dir, rank, header, {source}, 0).ok());
    }
  }
  auto both = ResumePointChooser::ChooseFromDirectory(dir, nullptr);
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_EQ(both->step, 6);
  EXPECT_EQ(both->world_size, 2);

  const std::string bad = recovery::ShardCheckpointPath(dir, 1, 6);
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(std::filesystem::file_size(bad) / 2));
    f.put('\xff');
  }
  std::vector<std::string> problems;
  auto older = ResumePointChooser::ChooseFromDirectory(dir, &problems);
  ASSERT_TRUE(older.ok()) << older.status();
  EXPECT_EQ(older->step, 3);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], HasSubstr("DATA_LOSS"));
  EXPECT_THAT(problems[0], HasSubstr(bad));

  std::filesystem::create_directory(dir + "/rank-2");
  auto none = ResumePointChooser::ChooseFromDirectory(dir, nullptr);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace shardd::state
