#include "daemon/coordinator/progress_watch.h"

#include <optional>
#include <string>

#include "daemon/core/mono_time.h"
#include "gtest/gtest.h"

namespace shardd::coordinator {
namespace {

const MonoTime kT0 = MonoTime::FromOrigin(absl::Seconds(1'000'000));

EpochEnd Ended(int64_t epoch, const std::string& membership,
               const std::string& planned_membership, bool planned, bool ready,
               bool partitioned, const std::string& cause) {
  EpochEnd end;
  end.time = kT0 + absl::Seconds(epoch);
  end.epoch = epoch;
  end.membership = membership;
  end.planned = planned;
  end.planned_membership = planned_membership;
  end.ready = ready;
  end.partitioned = partitioned;
  end.cause = cause;
  return end;
}

class ProgressWatchTest : public ::testing::Test {
 protected:
  ProgressWatchTest() : watch_(Options(3, 4)) {}

  static ProgressWatchOptions Options(int failed, int without_commit) {
    ProgressWatchOptions options;
    options.max_failed_epochs = failed;
    options.max_epochs_without_commit = without_commit;
    return options;
  }

  // Epoch `epoch_` ends `seconds` after kT0 with the plan issued to
  // `membership` and `membership` still in the slots.
  std::optional<Stall> End(bool ready, const std::string& membership = "abcd",
                           bool partitioned = false) {
    return watch_.EpochEnded(Ended(epoch_++, membership, membership,
                                   /*planned=*/true, ready, partitioned,
                                   "rank 3 reported its communicators broken"));
  }

  ProgressWatch watch_;
  int64_t epoch_ = 2;
};

TEST_F(ProgressWatchTest, EpochsNeverReadyStallAtTheirBound) {
  EXPECT_FALSE(End(false).has_value());
  EXPECT_FALSE(End(false).has_value());
  std::optional<Stall> stall = End(false);
  ASSERT_TRUE(stall.has_value());
  EXPECT_FALSE(stall->without_commit);
  EXPECT_EQ(stall->epochs, 3);
  EXPECT_EQ(stall->since, kT0 + absl::Seconds(2));
  ASSERT_EQ(stall->causes.size(), 3u);
  EXPECT_EQ(stall->causes[0],
            "epoch 2: rank 3 reported its communicators broken");
}

TEST_F(ProgressWatchTest, ReadyEpochsWithoutACommitStallAtTheirBound) {
  // The members form every epoch, but no step completes in any.
  for (int i = 0; i < 3; ++i) {
    watch_.Ready();
    EXPECT_FALSE(End(true).has_value()) << i;
  }
  watch_.Ready();
  std::optional<Stall> stall = End(true);
  ASSERT_TRUE(stall.has_value());
  EXPECT_TRUE(stall->without_commit);
  EXPECT_EQ(stall->epochs, 4);
  EXPECT_EQ(stall->since, kT0 + absl::Seconds(2));
  EXPECT_EQ(watch_.failed_epochs(), 0);
}

TEST_F(ProgressWatchTest, ACommittedStepResetsBothCounts) {
  watch_.Ready();
  End(true);
  End(false);
  End(false);
  EXPECT_EQ(watch_.epochs_without_commit(), 3);
  EXPECT_EQ(watch_.failed_epochs(), 2);
  watch_.Committed();
  EXPECT_EQ(watch_.epochs_without_commit(), 0);
  EXPECT_EQ(watch_.failed_epochs(), 0);
  // Three more without a commit are not yet four in a row.
  for (int i = 0; i < 3; ++i) {
    watch_.Ready();
    EXPECT_FALSE(End(true).has_value());
  }
}

TEST_F(ProgressWatchTest, ReadinessResetsOnlyTheNeverReadyCount) {
  End(false);
  End(false);
  watch_.Ready();
  EXPECT_EQ(watch_.failed_epochs(), 0);
  EXPECT_EQ(watch_.epochs_without_commit(), 2);
  End(true);
  // Unready epochs and ready ones without a commit are one spell of no
  // progress.
  std::optional<Stall> stall = End(false);
  ASSERT_TRUE(stall.has_value());
  EXPECT_TRUE(stall->without_commit);
  EXPECT_EQ(stall->epochs, 4);
}

TEST_F(ProgressWatchTest, AMembershipChangeResetsBothCounts) {
  End(false);
  End(false);
  watch_.Ready();
  End(true);
  // A member replaced during the epoch: the plan went out to abcd, the
  // slots now hold abce.
  EXPECT_FALSE(watch_
                   .EpochEnded(Ended(epoch_++, "abce", "abcd",
                                     /*planned=*/true, /*ready=*/false,
                                     /*partitioned=*/false, "rank 3 removed"))
                   .has_value());
  EXPECT_EQ(watch_.failed_epochs(), 0);
  EXPECT_EQ(watch_.epochs_without_commit(), 0);
  // A spell of another membership starts its own count.
  End(false, "abce");
  End(false, "abce");
  EXPECT_EQ(watch_.failed_epochs(), 2);
  EXPECT_EQ(watch_.epochs_without_commit(), 2);
}

TEST_F(ProgressWatchTest, EpochsWithoutAPlanOrCutOffAreNotCounted) {
  End(false);
  EXPECT_FALSE(watch_
                   .EpochEnded(Ended(epoch_++, "abcd", "", /*planned=*/false,
                                     /*ready=*/false, /*partitioned=*/false,
                                     "waiting for rank 3"))
                   .has_value());
  EXPECT_FALSE(End(false, "abcd", /*partitioned=*/true).has_value());
  EXPECT_FALSE(End(false, "abcd", /*partitioned=*/true).has_value());
  EXPECT_EQ(watch_.failed_epochs(), 1);
  EXPECT_EQ(watch_.epochs_without_commit(), 1);
}

TEST_F(ProgressWatchTest, ALongSpellKeepsItsFirstAndLastCauses) {
  ProgressWatch watch(Options(100, 9));
  std::optional<Stall> stall;
  for (int e = 10; e < 19; ++e) {
    watch.Ready();
    stall = watch.EpochEnded(Ended(e, "m", "m", /*planned=*/true,
                                   /*ready=*/true, /*partitioned=*/false, "x"));
  }
  ASSERT_TRUE(stall.has_value());
  EXPECT_EQ(stall->epochs, 9);
  ASSERT_EQ(stall->causes.size(), 6u);
  EXPECT_EQ(stall->causes[0], "epoch 10: x");
  EXPECT_EQ(stall->causes[1], "epoch 11: x");
  EXPECT_EQ(stall->causes[2], "(4 more)");
  EXPECT_EQ(stall->causes[3], "epoch 16: x");
  EXPECT_EQ(stall->causes[5], "epoch 18: x");
}

}  // namespace
}  // namespace shardd::coordinator
