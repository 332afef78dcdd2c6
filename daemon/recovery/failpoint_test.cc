#include "daemon/recovery/failpoint.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardd::recovery {
namespace {

class FailpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    Failpoints::ResetForTest();
  }
  void TearDown() override { Failpoints::ResetForTest(); }
};

void ExpectInvalid(absl::string_view spec, absl::string_view needle) {
  absl::Status status = Failpoints::Configure(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
      << spec << ": " << status;
  EXPECT_NE(status.message().find(std::string(needle)), std::string::npos)
      << status.message();
}

TEST_F(FailpointTest, AcceptsEveryKnownNameAndAction) {
  EXPECT_TRUE(Failpoints::Configure(
                  "allgather.mid:kill@3, reducescatter.mid:stop,"
                  "allreduce.mid:abort@2,vote.before:exit,vote.after:sleep=0,"
                  "optimizer.mid:kill,transfer.source.mid:kill,"
                  "transfer.target.mid:kill,checkpoint.write.mid:exit@7,"
                  "recovery.before_ready:sleep=10@2,vote.answer:fail@5,"
                  "commit.decided:kill@5")
                  .ok());
  EXPECT_TRUE(Failpoints::armed());
  EXPECT_EQ(Failpoints::KnownNames().size(), 16u);
}

TEST_F(FailpointTest, FailActionIsReportedToItsSiteOnTheArmedHitOnly) {
  ASSERT_TRUE(
      Failpoints::Configure("vote.answer:fail@2,vote.before:sleep=0").ok());
  EXPECT_FALSE(SHARDD_FAILPOINT_FAILS("vote.answer"));  // Hit 1.
  EXPECT_TRUE(SHARDD_FAILPOINT_FAILS("vote.answer"));   // Hit 2: armed.
  EXPECT_FALSE(SHARDD_FAILPOINT_FAILS("vote.answer"));  // Hit 3.
  // Another action at a FAILS site runs and does not count as a failure.
  EXPECT_FALSE(SHARDD_FAILPOINT_FAILS("vote.before"));
  EXPECT_EQ(Failpoints::hits("vote.answer"), 3);
  Failpoints::ResetForTest();
  EXPECT_FALSE(SHARDD_FAILPOINT_FAILS("vote.answer"));  // Disarmed.
}

TEST_F(FailpointTest, EmptySpecDisarms) {
  ASSERT_TRUE(Failpoints::Configure("vote.before:kill").ok());
  EXPECT_TRUE(Failpoints::armed());
  ASSERT_TRUE(Failpoints::Configure("").ok());
  EXPECT_FALSE(Failpoints::armed());
  ASSERT_TRUE(Failpoints::Configure(" , ").ok());
  EXPECT_FALSE(Failpoints::armed());
}

TEST_F(FailpointTest, RejectsBadSpecsNamingTheEntry) {
  ExpectInvalid("allgather.mid:kill,bogus.point:kill", "'bogus.point:kill'");
  ExpectInvalid("allgather.mid:kill,bogus.point:kill", "unknown name");
  ExpectInvalid("allgather.mid", "expected name:action");
  ExpectInvalid("allgather.mid:explode", "unknown action 'explode'");
  ExpectInvalid("allgather.mid:kill@0", "@N must be an integer >= 1");
  ExpectInvalid("allgather.mid:kill@x", "@N must be an integer >= 1");
  ExpectInvalid("allgather.mid:sleep=-5", "sleep=MS");
  ExpectInvalid("allgather.mid:sleep=abc", "sleep=MS");
  ExpectInvalid("vote.after:kill@2,vote.after:exit@2", "armed twice");
}

TEST_F(FailpointTest, RejectedSpecLeavesConfigurationUnchanged) {
  ASSERT_TRUE(Failpoints::Configure("vote.before:sleep=0@2").ok());
  Failpoints::Hit("vote.before");
  EXPECT_FALSE(Failpoints::Configure("vote.before:nope").ok());
  EXPECT_TRUE(Failpoints::armed());
  EXPECT_EQ(Failpoints::hits("vote.before"), 1);
}

TEST_F(FailpointTest, CountsHitsOnlyWhileArmed) {
  SHARDD_FAILPOINT("allgather.mid");
  EXPECT_EQ(Failpoints::hits("allgather.mid"), 0);  // Macro skipped Hit.
  ASSERT_TRUE(Failpoints::Configure("vote.before:sleep=0@100").ok());
  for (int i = 0; i < 5; ++i) SHARDD_FAILPOINT("allgather.mid");
  SHARDD_FAILPOINT("vote.before");
  EXPECT_EQ(Failpoints::hits("allgather.mid"), 5);
  EXPECT_EQ(Failpoints::hits("vote.before"), 1);
  EXPECT_EQ(Failpoints::hits("vote.after"), 0);
  // Configure resets the counts.
  ASSERT_TRUE(Failpoints::Configure("vote.before:sleep=0@100").ok());
  EXPECT_EQ(Failpoints::hits("allgather.mid"), 0);
}

TEST_F(FailpointTest, CountsHitsFromManyThreads) {
  ASSERT_TRUE(Failpoints::Configure("vote.before:sleep=0@1000000").ok());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1000; ++i) SHARDD_FAILPOINT("optimizer.mid");
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(Failpoints::hits("optimizer.mid"), 4000);
}

TEST_F(FailpointTest, SleepFiresOnlyOnTheNthHitAndContinues) {
  ASSERT_TRUE(Failpoints::Configure("vote.after:sleep=30@2").ok());
  ::testing::internal::CaptureStderr();
  SHARDD_FAILPOINT("vote.after");
  const std::string after_first = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(after_first, "");
  ::testing::internal::CaptureStderr();
  const absl::Time start = absl::Now();
  SHARDD_FAILPOINT("vote.after");
  const absl::Duration slept = absl::Now() - start;
  const std::string after_second = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(after_second, "failpoint vote.after: sleep=30 (hit 2)\n");
  EXPECT_GE(slept, absl::Milliseconds(30));  // A sleep never ends early.
  ::testing::internal::CaptureStderr();
  SHARDD_FAILPOINT("vote.after");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(Failpoints::hits("vote.after"), 3);
}

TEST_F(FailpointTest, KillRaisesSigkillAtTheNthHit) {
  EXPECT_EXIT(
      {
        if (!Failpoints::Configure("allgather.mid:kill@3").ok()) _exit(1);
        SHARDD_FAILPOINT("allgather.mid");
        SHARDD_FAILPOINT("allgather.mid");
        SHARDD_FAILPOINT("allgather.mid");
        _exit(0);
      },
      ::testing::KilledBySignal(SIGKILL),
      "failpoint allgather\\.mid: kill \\(hit 3\\)");
}

TEST_F(FailpointTest, ExitEndsWithCodeThree) {
  EXPECT_EXIT(
      {
        if (!Failpoints::Configure("checkpoint.write.mid:exit").ok()) _exit(1);
        SHARDD_FAILPOINT("checkpoint.write.mid");
        _exit(0);
      },
      ::testing::ExitedWithCode(3),
      "failpoint checkpoint\\.write\\.mid: exit \\(hit 1\\)");
}

TEST_F(FailpointTest, AbortRaisesSigabrt) {
  EXPECT_EXIT(
      {
        if (!Failpoints::Configure("optimizer.mid:abort").ok()) _exit(1);
        SHARDD_FAILPOINT("optimizer.mid");
        _exit(0);
      },
      ::testing::KilledBySignal(SIGABRT),
      "failpoint optimizer\\.mid: abort \\(hit 1\\)");
}

TEST_F(FailpointTest, StopFreezesUntilSigcont) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(pipe_fds[0]);
    if (!Failpoints::Configure("transfer.source.mid:stop").ok()) _exit(1);
    ::dup2(pipe_fds[1], STDERR_FILENO);
    SHARDD_FAILPOINT("transfer.source.mid");
    _exit(5);  // Only after SIGCONT.
  }
  ::close(pipe_fds[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, WUNTRACED), child);
  ASSERT_TRUE(WIFSTOPPED(status)) << status;
  EXPECT_EQ(WSTOPSIG(status), SIGSTOP);
  char buffer[128] = {};
  const ssize_t n = ::read(pipe_fds[0], buffer, sizeof(buffer) - 1);
  EXPECT_EQ(std::string(buffer, n > 0 ? n : 0),
            "failpoint transfer.source.mid: stop (hit 1)\n");
  ASSERT_EQ(::kill(child, SIGCONT), 0);
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 5);
  ::close(pipe_fds[0]);
}

TEST_F(FailpointTest, ConfigureFromEnvReadsTheVariable) {
  ::unsetenv("SHARDD_FAILPOINT");
  EXPECT_TRUE(Failpoints::ConfigureFromEnv().ok());
  EXPECT_FALSE(Failpoints::armed());
  ::setenv("SHARDD_FAILPOINT", "vote.before:sleep=0@9", 1);
  EXPECT_TRUE(Failpoints::ConfigureFromEnv().ok());
  EXPECT_TRUE(Failpoints::armed());
  ::setenv("SHARDD_FAILPOINT", "nope:kill", 1);
  absl::Status status = Failpoints::ConfigureFromEnv();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().rfind("SHARDD_FAILPOINT: ", 0), 0u)
      << status.message();
  ::unsetenv("SHARDD_FAILPOINT");
}

}  // namespace
}  // namespace shardd::recovery
