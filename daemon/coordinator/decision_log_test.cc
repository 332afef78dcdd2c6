#include "daemon/coordinator/decision_log.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

class DecisionLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/decision_log_test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    path_ = dir_ + "/decisions.log";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string dir_, path_;
};

TEST_F(DecisionLogTest, TheLastDecisionOutlivesTheProcess) {
  {
    auto log = DecisionLog::Open(path_);
    ASSERT_TRUE(log.ok()) << log.status();
    EXPECT_FALSE((*log)->last().has_value());  // A new file.
    ASSERT_TRUE(
        (*log)->Record({.step = 5, .epoch = 2, .fingerprint = 0xab}).ok());
    ASSERT_TRUE(
        (*log)->Record({.step = 6, .epoch = 2, .fingerprint = 0xcd}).ok());
  }
  auto again = DecisionLog::Open(path_);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE((*again)->last().has_value());
  EXPECT_EQ((*again)->last()->step, 6);
  EXPECT_EQ((*again)->last()->epoch, 2);
  EXPECT_EQ((*again)->last()->fingerprint, 0xcdu);
}

TEST_F(DecisionLogTest, ALineCutShortByACrashIsIgnored) {
  std::ofstream(path_) << "commit step=5 epoch=2 fingerprint=0xab\n"
                       << "commit step=6 epo";
  auto log = DecisionLog::Open(path_);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->last()->step, 5);
}

TEST_F(DecisionLogTest, AMalformedLineIsDataLossNamingIt) {
  std::ofstream(path_) << "commit step=5 epoch=2 fingerprint=0xab\n"
                       << "something else\n";
  auto log = DecisionLog::Open(path_);
  EXPECT_EQ(log.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(absl::StrContains(log.status().message(), path_ + ":2"))
      << log.status();
}

TEST_F(DecisionLogTest, AFolderThatIsNotThereIsNotFound) {
  auto log = DecisionLog::Open(dir_ + "/missing/decisions.log");
  EXPECT_EQ(log.status().code(), absl::StatusCode::kNotFound) << log.status();
}

TEST_F(DecisionLogTest, ALongLogIsCompactedToItsLastDecision) {
  auto log = DecisionLog::Open(path_, /*compact_lines=*/10);
  ASSERT_TRUE(log.ok());
  for (int64_t s = 1; s <= 13; ++s) {
    ASSERT_TRUE((*log)->Record({.step = s, .epoch = 1, .fingerprint = 7}).ok());
  }
  std::ifstream in(path_);
  int lines = 0;
  for (std::string line; std::getline(in, line);) ++lines;
  EXPECT_EQ(lines, 4);  // The last before compacting, then three.
  auto again = DecisionLog::Open(path_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)->last()->step, 13);
}

TEST(RecordedCommitSettlesTest, OnlyThatStepVotedWithThatFingerprint) {
  const DecisionLog::Commit recorded{.step = 6, .epoch = 3, .fingerprint = 9};
  EXPECT_TRUE(RecordedCommitSettles(recorded, 5, 6, 9));
  EXPECT_FALSE(RecordedCommitSettles(recorded, 5, 6, 8));  // Another job.
  EXPECT_FALSE(RecordedCommitSettles(recorded, 5, 0, 9));  // Not in doubt.
  EXPECT_FALSE(RecordedCommitSettles(recorded, 6, 7, 9));  // A later step.
  EXPECT_FALSE(RecordedCommitSettles(recorded, 4, 6, 9));  // Not on top.
}

}  // namespace
}  // namespace shardd::coordinator
