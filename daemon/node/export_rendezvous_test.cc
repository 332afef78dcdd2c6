#include "daemon/node/export_rendezvous.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "daemon/comm/in_memory_store.h"
#include "daemon/core/rendezvous_key.h"
#include "gtest/gtest.h"

namespace shardd::node {
namespace {

class ExportRendezvousTest : public ::testing::Test {
 protected:
  // Runs Agree(steps[r]) on each rank in `ranks` at once (world
  // `world`); the statuses by rank (OK for ranks that did not call).
  std::vector<absl::Status> AgreeOn(int world, const std::vector<int>& ranks,
                                    const std::vector<int64_t>& steps,
                                    absl::Duration window) {
    std::vector<absl::Status> statuses(world);
    std::vector<std::thread> threads;
    for (int r : ranks) {
      threads.emplace_back([&, r] {
        ExportRendezvous rendezvous(store_, {.rank = r,
                                             .world_size = world,
                                             .window = window,
                                             .attempt_id = nullptr});
        statuses[r] = rendezvous.Agree(steps[r]);
      });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

  comm::InMemoryStore store_;
};

TEST_F(ExportRendezvousTest, EveryRankJoinedGoesAhead) {
  const std::vector<absl::Status> s =
      AgreeOn(4, {3, 1, 0, 2}, {7, 7, 7, 7}, absl::Seconds(30));
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(s[r].ok()) << r << ": " << s[r];
  absl::StatusOr<std::string> decision =
      store_.Get(core::ExportKey(0, "decision"));
  ASSERT_TRUE(decision.ok());
  EXPECT_TRUE(absl::EndsWith(*decision, ":go")) << *decision;
}

TEST_F(ExportRendezvousTest, ARankThatNeverCallsFailsEveryRankNamingIt) {
  const std::vector<absl::Status> s =
      AgreeOn(3, {0, 1}, {7, 7, 7}, absl::Milliseconds(300));
  for (int r : {0, 1}) {
    EXPECT_EQ(s[r].code(), absl::StatusCode::kFailedPrecondition)
        << r << ": " << s[r];
    EXPECT_TRUE(absl::StrContains(s[r].message(), "rank 2")) << s[r];
    EXPECT_TRUE(absl::StrContains(s[r].message(), "nothing was gathered"))
        << s[r];
  }
}

TEST_F(ExportRendezvousTest, WithoutRankZeroNoRankJoinsAnything) {
  const std::vector<absl::Status> s =
      AgreeOn(3, {1, 2}, {7, 7, 7}, absl::Milliseconds(300));
  for (int r : {1, 2}) {
    EXPECT_EQ(s[r].code(), absl::StatusCode::kDeadlineExceeded)
        << r << ": " << s[r];
    EXPECT_TRUE(
        absl::StrContains(s[r].message(), "rank 0 did not start one at step 7"))
        << s[r];
    EXPECT_TRUE(
        absl::IsNotFound(store_.Get(core::ExportKey(r, "join")).status()))
        << "rank " << r << " joined nothing";
  }
}

TEST_F(ExportRendezvousTest, RanksAtOtherStepsNeverGatherAndSaySo) {
  const std::vector<absl::Status> s =
      AgreeOn(2, {0, 1}, {5, 6}, absl::Milliseconds(300));
  EXPECT_EQ(s[0].code(), absl::StatusCode::kFailedPrecondition) << s[0];
  EXPECT_TRUE(absl::StrContains(s[0].message(), "rank 1")) << s[0];
  EXPECT_EQ(s[1].code(), absl::StatusCode::kDeadlineExceeded) << s[1];
  EXPECT_TRUE(
      absl::StrContains(s[1].message(), "its last offer was for step 5"))
      << s[1];
}

TEST_F(ExportRendezvousTest, AnAbortedAttemptDoesNotSpoilTheNext) {
  // Rank 1 missed the first export at step 7: rank 0 decided abort.
  std::vector<absl::Status> s =
      AgreeOn(2, {0}, {7, 7}, absl::Milliseconds(200));
  ASSERT_EQ(s[0].code(), absl::StatusCode::kFailedPrecondition) << s[0];
  // The same export again, now on both ranks, rank 1 first: it must not
  // follow the first attempt's closed offer or its abort.
  s = AgreeOn(2, {1, 0}, {7, 7}, absl::Seconds(30));
  EXPECT_TRUE(s[0].ok()) << s[0];
  EXPECT_TRUE(s[1].ok()) << s[1];
}

TEST_F(ExportRendezvousTest, OneRankIsAlwaysAgreed) {
  const std::vector<absl::Status> s =
      AgreeOn(1, {0}, {3}, absl::Milliseconds(1));
  EXPECT_TRUE(s[0].ok()) << s[0];
}

}  // namespace
}  // namespace shardd::node
