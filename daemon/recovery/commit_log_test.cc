#include "daemon/recovery/commit_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardd::recovery {
namespace {

using Kind = CommitRecord::Kind;
using Logs = std::vector<std::vector<CommitRecord>>;

constexpr int kWorld = 4;
constexpr int kShards = 2;  // F = 2: replicas {0, 2} and {1, 3}.

uint32_t CrcOf(int shard, int64_t step) {
  return 0x1000u * static_cast<uint32_t>(shard + 1) +
         static_cast<uint32_t>(step);
}

CommitRecord Rec(Kind kind, int rank, int64_t step, int64_t epoch = 1) {
  return {kind, step, epoch, rank, rank % kShards, CrcOf(rank % kShards, step)};
}

// init, then commits 1..last.
std::vector<CommitRecord> FreshLog(int rank, int64_t last, int64_t epoch = 1) {
  std::vector<CommitRecord> log = {Rec(Kind::kInit, rank, 0, epoch)};
  for (int64_t s = 1; s <= last; ++s) {
    log.push_back(Rec(Kind::kCommit, rank, s, epoch));
  }
  return log;
}

Logs GoodRun(int64_t last) {
  Logs logs;
  for (int r = 0; r < kWorld; ++r) logs.push_back(FreshLog(r, last));
  return logs;
}

void ExpectViolation(const absl::Status& status, absl::string_view needle) {
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find(std::string(needle)), std::string::npos)
      << status.message();
}

class CommitLogTest : public ::testing::Test {
 protected:
  std::string TempPath(absl::string_view name) {
    const char* tmp = std::getenv("TEST_TMPDIR");
    return absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/", name);
  }
};

TEST_F(CommitLogTest, FormatsAndParsesEveryKind) {
  for (Kind kind : {Kind::kInit, Kind::kCommit, Kind::kRecovered,
                    Kind::kCheckpointRestored}) {
    CommitRecord record{kind, 5, 3, 1, 1, 0x1a2b3c4du};
    const std::string line = FormatCommitRecord(record);
    auto parsed = ParseCommitRecord(line);
    ASSERT_TRUE(parsed.ok()) << line << ": " << parsed.status();
    EXPECT_EQ(*parsed, record) << line;
  }
  EXPECT_EQ(FormatCommitRecord({Kind::kCommit, 5, 3, 1, 1, 0x1a2b3c4du}),
            "commit step=5 epoch=3 rank=1 shard=1 crc32c=0x1a2b3c4d");
  EXPECT_FALSE(ParseCommitRecord("commit step=5 epoch=3 rank=1 shard=1").ok());
  EXPECT_FALSE(
      ParseCommitRecord("commit step=-5 epoch=3 rank=1 shard=1 crc32c=0x1")
          .ok());
  EXPECT_FALSE(
      ParseCommitRecord("done step=5 epoch=3 rank=1 shard=1 crc32c=0x1").ok());
  EXPECT_FALSE(
      ParseCommitRecord("commit epoch=3 step=5 rank=1 shard=1 crc32c=0x1")
          .ok());
  EXPECT_FALSE(
      ParseCommitRecord("commit step=5 epoch=3 rank=1 shard=1 crc32c=0xzz")
          .ok());
}

TEST_F(CommitLogTest, AppendThenReadRoundTrips) {
  const std::string path = TempPath("round_trip.log");
  ::unlink(path.c_str());
  std::vector<CommitRecord> written = FreshLog(1, 3);
  {
    auto log = CommitLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    for (const CommitRecord& r : written) ASSERT_TRUE((*log)->Append(r).ok());
  }
  {
    // Reopening appends.
    auto log = CommitLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    written.push_back(Rec(Kind::kCommit, 1, 4));
    ASSERT_TRUE((*log)->Append(written.back()).ok());
  }
  auto read = CommitLog::Read(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, written);
}

TEST_F(CommitLogTest, ConcurrentAppendsKeepWholeLines) {
  const std::string path = TempPath("concurrent.log");
  ::unlink(path.c_str());
  auto log = CommitLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        ASSERT_TRUE((*log)->Append(Rec(Kind::kCommit, t, i + 1)).ok());
      }
    });
  }
  for (auto& thread : threads) thread.join();
  auto read = CommitLog::Read(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 100u);
}

TEST_F(CommitLogTest, RejectsNegativeFields) {
  const std::string path = TempPath("negative.log");
  auto log = CommitLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ((*log)->Append({Kind::kCommit, -1, 1, 0, 0, 0}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CommitLogTest, TornLastLineIsIgnoredAndCutOffOnReopen) {
  const std::string path = TempPath("torn.log");
  ::unlink(path.c_str());
  {
    auto log = CommitLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(Rec(Kind::kInit, 0, 0)).ok());
    ASSERT_TRUE((*log)->Append(Rec(Kind::kCommit, 0, 1)).ok());
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  const std::string torn = "commit step=2 epo";
  ASSERT_EQ(::write(fd, torn.data(), torn.size()),
            static_cast<ssize_t>(torn.size()));
  ::close(fd);
  auto read = CommitLog::Read(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->size(), 2u);
  {
    auto log = CommitLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    ASSERT_TRUE((*log)->Append(Rec(Kind::kCommit, 0, 2)).ok());
  }
  read = CommitLog::Read(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->size(), 3u);
  EXPECT_EQ((*read)[2], Rec(Kind::kCommit, 0, 2));
}

TEST_F(CommitLogTest, MalformedLineIsDataLossNamingFileAndLine) {
  const std::string path = TempPath("malformed.log");
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  const std::string text =
      "init step=0 epoch=1 rank=0 shard=0 crc32c=0x00000001\n"
      "garbage\n"
      "commit step=1 epoch=1 rank=0 shard=0 crc32c=0x00000001\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()),
            static_cast<ssize_t>(text.size()));
  ::close(fd);
  auto read = CommitLog::Read(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(read.status().message().find(path + ":2:"), std::string::npos)
      << read.status();
}

TEST_F(CommitLogTest, MissingFileIsNotFound) {
  EXPECT_EQ(CommitLog::Read(TempPath("does-not-exist.log")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(CommitLog::Open(TempPath("no-such-dir/x.log")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(CommitLogTest, CheckAcceptsAGoodRun) {
  EXPECT_TRUE(CheckCommitLogs(GoodRun(5), kWorld, kShards, 5).ok())
      << CheckCommitLogs(GoodRun(5), kWorld, kShards, 5);
  EXPECT_TRUE(CheckCommitLogs(GoodRun(5), kWorld, kShards, -1).ok());
  const CommitLogSummary summary = SummarizeCommitLogs(GoodRun(5));
  EXPECT_EQ(summary.records, 24);
  EXPECT_EQ(summary.ranks, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(summary.min_final_step, 5);
  EXPECT_EQ(summary.max_final_step, 5);
}

TEST_F(CommitLogTest, FinalRecordRepeatsTheLastStepWithItsState) {
  Logs logs = GoodRun(5);
  for (int r = 0; r < kWorld; ++r) logs[r].push_back(Rec(Kind::kFinal, r, 5));
  EXPECT_TRUE(CheckCommitLogs(logs, kWorld, kShards, 5).ok())
      << CheckCommitLogs(logs, kWorld, kShards, 5);
  // A final record at another step than the last, or with other bytes.
  logs[2].back() = Rec(Kind::kFinal, 2, 4);
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 5),
                  "final at step 4 but the last step is 5");
  logs = GoodRun(5);
  logs[1].push_back(Rec(Kind::kFinal, 1, 5));
  logs[1].back().shard_crc32c ^= 1;
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 5),
                  "shard 1 step 5: crc32c");
  auto parsed = ParseCommitRecord(FormatCommitRecord(Rec(Kind::kFinal, 3, 9)));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->kind, Kind::kFinal);
}

// A job resumed from its checkpoints of step 6: each log starts with
// checkpoint_restored at 6, then 7, 8, ...
TEST_F(CommitLogTest, AResumedRunIsCheckedFromItsFirstStep) {
  Logs logs;
  for (int r = 0; r < kWorld; ++r) {
    logs.push_back({Rec(Kind::kCheckpointRestored, r, 6)});
    for (int64_t s = 7; s <= 9; ++s)
      logs[r].push_back(Rec(Kind::kCommit, r, s));
  }
  // Counted from step 0, steps 1..5 are missing.
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 9),
                  "rank 0 step 1..5: never committed");
  EXPECT_TRUE(CheckCommitLogs(logs, kWorld, kShards, 9, 6).ok())
      << CheckCommitLogs(logs, kWorld, kShards, 9, 6);
  // The other rules hold as for any run: a gap, replicas that disagree.
  Logs gap = logs;
  gap[1].erase(gap[1].begin() + 2);  // Step 8.
  ExpectViolation(CheckCommitLogs(gap, kWorld, kShards, 9, 6),
                  "rank 1 step 9 (log #1, commit): expected step 8");
  logs[2][0].shard_crc32c ^= 1;
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 9, 6),
                  "step 6: crc32c");
  EXPECT_EQ(CheckCommitLogs(logs, kWorld, kShards, 9, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CommitLogTest, CheckRejectsBadWorld) {
  EXPECT_EQ(CheckCommitLogs(GoodRun(1), 4, 3, -1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckCommitLogs(GoodRun(1), 0, 1, -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CommitLogTest, CheckRejectsWrongFinalStepAndMissingRank) {
  ExpectViolation(CheckCommitLogs(GoodRun(5), kWorld, kShards, 6),
                  "rank 0: last step 5, expected 6");
  Logs logs = GoodRun(5);
  logs.pop_back();
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, -1),
                  "rank 3: no records");
}

TEST_F(CommitLogTest, CheckRejectsAStepCommittedTwice) {
  Logs logs = GoodRun(5);
  // A replacement for rank 1 that started fresh instead of recovering.
  logs[1].resize(4);  // init, 1, 2, 3
  logs.push_back(FreshLog(1, 5, 2));
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 5),
                  "rank 1 step 1: committed 2 times (log #1, log #4)");
}

TEST_F(CommitLogTest, CheckRejectsASkippedStep) {
  Logs logs = GoodRun(5);
  logs[2].erase(logs[2].begin() + 3);  // Step 3 of rank 2.
  const absl::Status status = CheckCommitLogs(logs, kWorld, kShards, 5);
  ExpectViolation(status, "rank 2 step 4 (log #2, commit): expected step 3");
  ExpectViolation(status, "rank 2 step 3: never committed");
}

TEST_F(CommitLogTest, CheckRejectsReplicaCrcMismatch) {
  Logs logs = GoodRun(5);
  logs[3][4].shard_crc32c ^= 1;  // Rank 3 (shard 1) at step 4.
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 5),
                  "shard 1 step 4: crc32c");
}

TEST_F(CommitLogTest, CheckRejectsCommitWithoutStartRecordAndWrongShard) {
  Logs logs = GoodRun(2);
  logs[0].erase(logs[0].begin());
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 2),
                  "commit before any init");
  logs = GoodRun(2);
  logs[1][1].shard_index = 0;
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 2),
                  "rank 1 step 1 (log #1, commit): shard index 0, expected 1");
}

TEST_F(CommitLogTest, CheckAcceptsAValidRecovery) {
  // Rank 1 committed 1..3 and died; its replacement recovered at 3 from rank
  // 3 (same shard index) and committed 4..6.
  Logs logs = GoodRun(6);
  logs[1].resize(4);
  std::vector<CommitRecord> replacement = {Rec(Kind::kRecovered, 1, 3, 2)};
  for (int64_t s = 4; s <= 6; ++s) {
    replacement.push_back(Rec(Kind::kCommit, 1, s, 2));
  }
  logs.push_back(replacement);
  EXPECT_TRUE(CheckCommitLogs(logs, kWorld, kShards, 6).ok())
      << CheckCommitLogs(logs, kWorld, kShards, 6);

  // The old daemon died before recording step 3 (its replicas committed it):
  // recovering at 3 fills the gap.
  logs[1].resize(3);
  EXPECT_TRUE(CheckCommitLogs(logs, kWorld, kShards, 6).ok())
      << CheckCommitLogs(logs, kWorld, kShards, 6);

  // But it stopped at 1: step 2 is missing.
  logs[1].resize(2);
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 6),
                  "rank 1 step 2: never committed");
}

TEST_F(CommitLogTest, CheckRejectsRecoveryWithoutReplicaOrWithWrongBytes) {
  Logs logs = GoodRun(4);
  logs[1].resize(3);  // Rank 1 committed 1, 2.
  logs.push_back({Rec(Kind::kRecovered, 1, 2, 2), Rec(Kind::kCommit, 1, 3, 2),
                  Rec(Kind::kCommit, 1, 4, 2)});
  ASSERT_TRUE(CheckCommitLogs(logs, kWorld, kShards, 4).ok());
  // The recovered bytes differ from what the replicas committed.
  logs[4][0].shard_crc32c ^= 0x100;
  ExpectViolation(CheckCommitLogs(logs, kWorld, kShards, 4),
                  "shard 1 step 2: crc32c");
  // With F = W there is no replica to recover from.
  Logs full;
  for (int r = 0; r < 2; ++r) {
    full.push_back(
        {{Kind::kInit, 0, 1, r, r, 7}, {Kind::kCommit, 1, 1, r, r, 8}});
  }
  full.push_back(
      {{Kind::kRecovered, 1, 2, 1, 1, 8}, {Kind::kCommit, 2, 2, 1, 1, 9}});
  full[0].push_back({Kind::kCommit, 2, 2, 0, 0, 9});
  ExpectViolation(CheckCommitLogs(full, 2, 2, 2),
                  "rank 1 step 1 (log #2): recovered, but no other rank of "
                  "shard 1 committed or restored step 1");
}

TEST_F(CommitLogTest, CheckAcceptsCheckpointRollback) {
  // W = F = 2: no replicas. Rank 1 dies after step 4; everyone restores
  // the step-2 checkpoint in epoch 2 and redoes 3..5.
  Logs logs;
  for (int r = 0; r < 2; ++r) {
    std::vector<CommitRecord> log = {{Kind::kInit, 0, 1, r, r, 100u}};
    for (int64_t s = 1; s <= 4; ++s) {
      log.push_back(
          {Kind::kCommit, s, 1, r, r, static_cast<uint32_t>(100 + s)});
    }
    logs.push_back(log);
  }
  logs[0].push_back({Kind::kCheckpointRestored, 2, 2, 0, 0, 102u});
  logs.push_back({{Kind::kCheckpointRestored, 2, 2, 1, 1, 102u}});
  for (int64_t s = 3; s <= 5; ++s) {
    logs[0].push_back(
        {Kind::kCommit, s, 2, 0, 0, static_cast<uint32_t>(100 + s)});
    logs[2].push_back(
        {Kind::kCommit, s, 2, 1, 1, static_cast<uint32_t>(100 + s)});
  }
  EXPECT_TRUE(CheckCommitLogs(logs, 2, 2, 5).ok())
      << CheckCommitLogs(logs, 2, 2, 5);
  // Without the rollback record rank 0's redone steps are duplicates.
  logs[0].erase(logs[0].begin() + 5);
  ExpectViolation(CheckCommitLogs(logs, 2, 2, 5),
                  "rank 0 step 3 (log #0, commit): expected step 5");
}

}  // namespace
}  // namespace shardd::recovery
