#include "daemon/state/resume_point.h"

#include <map>
#include <set>
#include <string>
#include <vector>

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

}  // namespace
}  // namespace shardd::state
