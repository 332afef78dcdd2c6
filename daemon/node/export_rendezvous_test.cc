#include "daemon/node/export_rendezvous.h"

#include <memory>
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
        ExportRendezvous rendezvous(store_, Options(r, world, window));
        absl::StatusOr<ExportRendezvous::Agreement> agreed =
            rendezvous.Agree(steps[r]);
        statuses[r] = agreed.status();
        if (agreed.ok() && *agreed != ExportRendezvous::Agreement::kGo) {
          statuses[r] = absl::InternalError("not kGo");
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return statuses;
  }

  ExportRendezvous::Options Options(int rank, int world,
                                    absl::Duration window) {
    return {.rank = rank,
            .world_size = world,
            .window = window,
            .attempt_id = nullptr,
            .record = &records_[rank]};
  }

  // Agree on `step` in `store` on ranks 0 .. world-1 at once, each with its
  // own rendezvous (kept for Conclude).
  std::vector<std::unique_ptr<ExportRendezvous>> AgreeAll(comm::Store& store,
                                                          int world,
                                                          int64_t step) {
    std::vector<std::unique_ptr<ExportRendezvous>> rendezvous;
    for (int r = 0; r < world; ++r) {
      rendezvous.push_back(std::make_unique<ExportRendezvous>(
          store, Options(r, world, absl::Seconds(30))));
    }
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        absl::StatusOr<ExportRendezvous::Agreement> agreed =
            rendezvous[r]->Agree(step);
        EXPECT_TRUE(agreed.ok()) << r << ": " << agreed.status();
        if (agreed.ok()) {
          EXPECT_EQ(*agreed, ExportRendezvous::Agreement::kGo) << r;
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return rendezvous;
  }

  static MonoTime Soon() { return MonoNow() + absl::Seconds(10); }

  comm::InMemoryStore store_;
  ExportRecord records_[4];
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

// Rank 0 could not write the file (disk full); rank 2 (another shard
// group) finished its gathers: both end with rank 0's outcome, and an
// export that rank 0 wrote is OK everywhere.
TEST_F(ExportRendezvousTest, EveryRankEndsWithRankZerosOutcome) {
  std::vector<std::unique_ptr<ExportRendezvous>> failed =
      AgreeAll(store_, 3, 7);
  absl::Status follower_one, follower_two;
  std::thread one(
      [&] { follower_one = failed[1]->Conclude(7, absl::OkStatus(), Soon()); });
  std::thread two(
      [&] { follower_two = failed[2]->Conclude(7, absl::OkStatus(), Soon()); });
  const absl::Status writer = failed[0]->Conclude(
      7, absl::ResourceExhaustedError("disk full: /out"), Soon());
  one.join();
  two.join();
  EXPECT_TRUE(absl::IsResourceExhausted(writer)) << writer;
  for (const absl::Status& s : {follower_one, follower_two}) {
    EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
    EXPECT_TRUE(absl::StrContains(
        s.message(), "rank 0 did not write the file: disk full: /out"))
        << s;
  }

  std::vector<std::unique_ptr<ExportRendezvous>> written =
      AgreeAll(store_, 3, 8);
  EXPECT_TRUE(written[0]->Conclude(8, absl::OkStatus(), Soon()).ok());
  EXPECT_TRUE(written[1]->Conclude(8, absl::OkStatus(), Soon()).ok());
  // A rank's own failure is its answer (rank 0's gathers with it failed).
  EXPECT_TRUE(absl::IsAborted(
      written[2]->Conclude(8, absl::AbortedError("gather failed"), Soon())));
}

// Rank 1 did not learn the outcome (the epoch ended: here its deadline
// passed first) and is told ABORTED or DEADLINE_EXCEEDED; rank 0 wrote
// the file and was told OK, so only rank 1's trainer exports again. In the
// next epoch's store (rank 0 publishes its last outcome there) rank 1's
// retry is told the file was written, without an offer from rank 0.
TEST_F(ExportRendezvousTest, ARetryLearnsThatRankZeroWroteTheFileBefore) {
  std::vector<std::unique_ptr<ExportRendezvous>> first = AgreeAll(store_, 2, 7);
  const absl::Status unknown =
      first[1]->Conclude(7, absl::OkStatus(), MonoNow());
  EXPECT_TRUE(absl::IsDeadlineExceeded(unknown)) << unknown;
  ASSERT_TRUE(records_[1].Unresolved(7).has_value());
  EXPECT_TRUE(first[0]->Conclude(7, absl::OkStatus(), Soon()).ok());

  comm::InMemoryStore next_epoch;
  // Without rank 0's outcome there, the retry waits for an offer.
  ExportRendezvous waits(next_epoch, Options(1, 2, absl::Milliseconds(100)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(waits.Agree(7).status()));
  ExportRendezvous::PublishOutcome(next_epoch, records_[0], 0);
  ExportRendezvous retry(next_epoch, Options(1, 2, absl::Seconds(30)));
  absl::StatusOr<ExportRendezvous::Agreement> agreed = retry.Agree(7);
  ASSERT_TRUE(agreed.ok()) << agreed.status();
  EXPECT_EQ(*agreed, ExportRendezvous::Agreement::kWrittenBefore);
  EXPECT_FALSE(records_[1].Unresolved(7).has_value());
}

// The unresolved attempt failed on rank 0 too: both trainers export again
// and the retry joins rank 0's new offer.
TEST_F(ExportRendezvousTest, ARetryOfAnAttemptRankZeroFailedJoinsItsNewOne) {
  std::vector<std::unique_ptr<ExportRendezvous>> first = AgreeAll(store_, 2, 7);
  EXPECT_FALSE(first[1]->Conclude(7, absl::OkStatus(), MonoNow()).ok());
  EXPECT_TRUE(absl::IsAborted(
      first[0]->Conclude(7, absl::AbortedError("gather failed"), Soon())));
  comm::InMemoryStore next_epoch;
  ExportRendezvous::PublishOutcome(next_epoch, records_[0], 0);
  std::vector<std::unique_ptr<ExportRendezvous>> again =
      AgreeAll(next_epoch, 2, 7);  // Both kGo.
  EXPECT_FALSE(records_[1].Unresolved(7).has_value());
  EXPECT_TRUE(again[0]->Conclude(7, absl::OkStatus(), Soon()).ok());
  EXPECT_TRUE(again[1]->Conclude(7, absl::OkStatus(), Soon()).ok());
}

// Rank 0's daemon wrote the file, published "ok" and died before it
// answered its trainer; rank 1 learned the outcome and returned OK. In the
// next epoch rank 1 publishes what it learned, and rank 0's retry (its
// replacement remembers nothing) finds the file written instead of
// offering an attempt rank 1 never joins.
TEST_F(ExportRendezvousTest, RankZerosRetryFindsTheFileItsPredecessorWrote) {
  std::vector<std::unique_ptr<ExportRendezvous>> first = AgreeAll(store_, 2, 7);
  EXPECT_TRUE(first[0]->Conclude(7, absl::OkStatus(), Soon()).ok());
  EXPECT_TRUE(first[1]->Conclude(7, absl::OkStatus(), Soon()).ok());
  EXPECT_EQ(records_[1].learned(), records_[0].outcome());

  comm::InMemoryStore next_epoch;
  ExportRendezvous::PublishOutcome(next_epoch, records_[1], 1);
  ExportRecord replacement;  // Rank 0's new daemon.
  bool file_there = false;
  ExportRendezvous::Options options = Options(0, 2, absl::Milliseconds(100));
  options.record = &replacement;
  options.written = [&](int64_t step) { return step == 7 && file_there; };
  // The file is not (or no longer) there: offered as usual, and nobody
  // joins.
  ExportRendezvous offers(next_epoch, options);
  EXPECT_TRUE(absl::IsFailedPrecondition(offers.Agree(7).status()));
  file_there = true;
  ExportRendezvous retry(next_epoch, options);
  absl::StatusOr<ExportRendezvous::Agreement> agreed = retry.Agree(7);
  ASSERT_TRUE(agreed.ok()) << agreed.status();
  EXPECT_EQ(*agreed, ExportRendezvous::Agreement::kWrittenBefore);
  // Another step is a new export.
  EXPECT_TRUE(absl::IsFailedPrecondition(retry.Agree(8).status()));
}

// What ranks learned lasts until a step is committed: a later export at
// the same step number (after a rollback) is a new one.
TEST_F(ExportRendezvousTest, WhatRanksLearnedIsForgottenAtTheNextCommit) {
  std::vector<std::unique_ptr<ExportRendezvous>> first = AgreeAll(store_, 2, 7);
  EXPECT_TRUE(first[0]->Conclude(7, absl::OkStatus(), Soon()).ok());
  EXPECT_TRUE(first[1]->Conclude(7, absl::OkStatus(), Soon()).ok());
  records_[1].NoteCommitted();
  comm::InMemoryStore next_epoch;
  ExportRendezvous::PublishOutcome(next_epoch, records_[1], 1);
  ExportRecord replacement;
  ExportRendezvous::Options options = Options(0, 2, absl::Milliseconds(100));
  options.record = &replacement;
  options.written = [](int64_t) { return true; };
  ExportRendezvous retry(next_epoch, options);
  EXPECT_TRUE(absl::IsFailedPrecondition(retry.Agree(7).status()));
}

}  // namespace
}  // namespace shardd::node
