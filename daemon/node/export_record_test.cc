#include "daemon/node/export_record.h"

#include "gtest/gtest.h"

namespace shardd::node {
namespace {

TEST(ExportRecordTest, RemembersRankZerosLatestOutcome) {
  ExportRecord record;
  EXPECT_EQ(record.outcome(), "");
  record.NoteOutcome("5:a1:ok");
  record.NoteOutcome("6:b2:failed:10:gather failed");
  EXPECT_EQ(record.outcome(), "6:b2:failed:10:gather failed");
}

TEST(ExportRecordTest, AnUnresolvedAttemptIsOnlyTheStepsItWasOf) {
  ExportRecord record;
  EXPECT_FALSE(record.Unresolved(5).has_value());
  record.NoteUnresolved({5, "a1"});
  ASSERT_TRUE(record.Unresolved(5).has_value());
  EXPECT_EQ(record.Unresolved(5)->attempt, "a1");
  record.ClearUnresolved();  // Resolved, or a step committed since.
  EXPECT_FALSE(record.Unresolved(5).has_value());
  // An export of another step: the trainer moved on, the attempt is
  // forgotten (a rollback to step 5 exports anew).
  record.NoteUnresolved({5, "a2"});
  EXPECT_FALSE(record.Unresolved(6).has_value());
  EXPECT_FALSE(record.Unresolved(5).has_value());
}

TEST(ExportRecordTest, ACommitForgetsWhatWasLearnedAndUnresolved) {
  ExportRecord record;
  record.NoteLearned("5:a1:ok");
  record.NoteUnresolved({6, "b2"});
  record.NoteOutcome("5:a1:ok");
  EXPECT_EQ(record.learned(), "5:a1:ok");
  record.NoteCommitted();
  EXPECT_EQ(record.learned(), "");
  EXPECT_FALSE(record.Unresolved(6).has_value());
  // Rank 0's own last outcome stays: a rank's retry by attempt id is safe.
  EXPECT_EQ(record.outcome(), "5:a1:ok");
}

}  // namespace
}  // namespace shardd::node
