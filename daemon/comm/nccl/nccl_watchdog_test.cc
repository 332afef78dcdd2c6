#include "daemon/comm/nccl/nccl_watchdog.h"

#include "daemon/core/mono_time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardd::comm::nccl {
namespace {

using ::testing::HasSubstr;

const MonoTime kStart = MonoTime::FromOrigin(absl::Seconds(1000));
constexpr absl::Duration kTimeout = absl::Seconds(30);

OpPoll Poll(absl::Duration elapsed) {
  OpPoll poll;
  poll.started = kStart;
  poll.timeout = kTimeout;
  poll.now = kStart + elapsed;
  return poll;
}

TEST(NcclWatchdogTest, KeepsWaitingBeforeTheDeadline) {
  const WatchDecision d = DecideOp("all-gather", Poll(absl::Seconds(29)));
  EXPECT_EQ(d.action, WatchAction::kKeepWaiting);
  EXPECT_TRUE(d.status.ok());
  EXPECT_GT(d.next_poll, absl::ZeroDuration());
  EXPECT_LE(d.next_poll, absl::Milliseconds(1));
}

TEST(NcclWatchdogTest, FinishesWhenTheStreamIsDone) {
  OpPoll poll = Poll(absl::Milliseconds(3));
  poll.stream_done = true;
  const WatchDecision d = DecideOp("all-gather", poll);
  EXPECT_EQ(d.action, WatchAction::kDone);
  EXPECT_TRUE(d.status.ok());
}

TEST(NcclWatchdogTest, AbortsWithDeadlineExceededPastTheDeadline) {
  for (absl::Duration elapsed : {kTimeout, kTimeout + absl::Seconds(1)}) {
    const WatchDecision d = DecideOp("nccl all-gather #4", Poll(elapsed));
    EXPECT_EQ(d.action, WatchAction::kAbort);
    EXPECT_EQ(d.status.code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(d.status.message(), HasSubstr("nccl all-gather #4"));
    EXPECT_THAT(d.status.message(), HasSubstr("30s"));
  }
}

TEST(NcclWatchdogTest, CompletionSeenAtTheDeadlinePollStillCounts) {
  // The event reports done at the same poll the deadline passes: the
  // operation finished, its result is valid.
  OpPoll poll = Poll(kTimeout + absl::Milliseconds(1));
  poll.stream_done = true;
  EXPECT_EQ(DecideOp("x", poll).action, WatchAction::kDone);
}

TEST(NcclWatchdogTest, RemoteOrSystemErrorAbortsWithUnavailable) {
  for (NcclResultCode code :
       {NcclResultCode::kRemoteError, NcclResultCode::kSystemError}) {
    OpPoll poll = Poll(absl::Seconds(1));
    poll.async_error = code;
    const WatchDecision d = DecideOp("nccl reduce-scatter", poll);
    EXPECT_EQ(d.action, WatchAction::kAbort);
    EXPECT_EQ(d.status.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(d.status.message(), HasSubstr(NcclResultName(code)));
  }
}

TEST(NcclWatchdogTest, AnAsyncErrorWinsOverAFinishedStream) {
  // The communicator is broken: the next operation could not run anyway.
  OpPoll poll = Poll(absl::Seconds(1));
  poll.stream_done = true;
  poll.async_error = NcclResultCode::kRemoteError;
  EXPECT_EQ(DecideOp("x", poll).status.code(), absl::StatusCode::kUnavailable);
}

TEST(NcclWatchdogTest, InternalOrCudaErrorsAbortWithInternal) {
  OpPoll nccl = Poll(absl::Seconds(1));
  nccl.async_error = NcclResultCode::kInternalError;
  EXPECT_EQ(DecideOp("x", nccl).status.code(), absl::StatusCode::kInternal);
  OpPoll unhandled = Poll(absl::Seconds(1));
  unhandled.async_error = NcclResultCode::kUnhandledCudaError;
  EXPECT_EQ(DecideOp("x", unhandled).status.code(),
            absl::StatusCode::kInternal);
  OpPoll cuda = Poll(absl::Seconds(1));
  cuda.cuda_error = 700;  // cudaErrorIllegalAddress
  const WatchDecision d = DecideOp("x", cuda);
  EXPECT_EQ(d.action, WatchAction::kAbort);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(d.status.message(), HasSubstr("700"));
}

TEST(NcclWatchdogTest, InProgressDuringAnOperationIsNotAnError) {
  OpPoll poll = Poll(absl::Seconds(1));
  poll.async_error = NcclResultCode::kInProgress;
  EXPECT_EQ(DecideOp("x", poll).action, WatchAction::kKeepWaiting);
}

TEST(NcclWatchdogTest, ARequestedAbortWinsOverEverything) {
  OpPoll poll = Poll(absl::Seconds(31));
  poll.stream_done = true;
  poll.async_error = NcclResultCode::kRemoteError;
  poll.abort_requested = absl::AbortedError("membership changed");
  const WatchDecision d = DecideOp("x", poll);
  EXPECT_EQ(d.action, WatchAction::kAbort);
  EXPECT_EQ(d.status, absl::AbortedError("membership changed"));
}

PendingPoll Pending(absl::Duration elapsed, NcclResultCode code) {
  PendingPoll poll;
  poll.started = kStart;
  poll.timeout = kTimeout;
  poll.now = kStart + elapsed;
  poll.async_error = code;
  return poll;
}

TEST(NcclWatchdogTest, InitKeepsPollingWhileInProgressBeforeTheDeadline) {
  const WatchDecision d = DecidePending(
      "init", Pending(absl::Seconds(10), NcclResultCode::kInProgress));
  EXPECT_EQ(d.action, WatchAction::kKeepWaiting);
}

TEST(NcclWatchdogTest, InitIsReadyOnSuccess) {
  EXPECT_EQ(DecidePending("init",
                          Pending(absl::Seconds(40), NcclResultCode::kSuccess))
                .action,
            WatchAction::kDone);
}

TEST(NcclWatchdogTest, InitStillInProgressAtTheDeadlineAborts) {
  const WatchDecision d =
      DecidePending("ncclCommInitRankConfig (epoch 3)",
                    Pending(kTimeout, NcclResultCode::kInProgress));
  EXPECT_EQ(d.action, WatchAction::kAbort);
  EXPECT_EQ(d.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(d.status.message(), HasSubstr("epoch 3"));
}

TEST(NcclWatchdogTest, InitErrorsMapToTheirStatus) {
  EXPECT_EQ(DecidePending(
                "init", Pending(absl::Seconds(1), NcclResultCode::kRemoteError))
                .status.code(),
            absl::StatusCode::kUnavailable);
  // NCCL's "Duplicate GPU detected" is ncclInvalidUsage.
  EXPECT_EQ(DecidePending("init", Pending(absl::Seconds(1),
                                          NcclResultCode::kInvalidUsage))
                .status.code(),
            absl::StatusCode::kFailedPrecondition);
  PendingPoll aborted = Pending(absl::Seconds(1), NcclResultCode::kInProgress);
  aborted.abort_requested = absl::AbortedError("shutdown");
  EXPECT_EQ(DecidePending("init", aborted).status.code(),
            absl::StatusCode::kAborted);
}

TEST(NcclWatchdogTest, ResultCodesMapToStatuses) {
  EXPECT_TRUE(NcclResultToStatus(NcclResultCode::kSuccess, "x").ok());
  EXPECT_EQ(NcclResultToStatus(NcclResultCode::kInvalidArgument, "x").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(NcclResultToStatus(static_cast<NcclResultCode>(99), "x").code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(NcclResultName(static_cast<NcclResultCode>(99)),
            "unknown ncclResult_t");
}

TEST(NcclWatchdogTest, PollDelayGrowsToOneMillisecondAndNeverOvershoots) {
  EXPECT_EQ(NextPollDelay(absl::ZeroDuration(), absl::Seconds(1)),
            absl::Microseconds(10));
  EXPECT_EQ(NextPollDelay(absl::Microseconds(1600), absl::Seconds(1)),
            absl::Microseconds(100));
  EXPECT_EQ(NextPollDelay(absl::Seconds(5), absl::Seconds(1)),
            absl::Milliseconds(1));
  EXPECT_EQ(NextPollDelay(absl::Seconds(5), absl::Microseconds(3)),
            absl::Microseconds(3));
  EXPECT_EQ(NextPollDelay(absl::Seconds(5), -absl::Seconds(1)),
            absl::ZeroDuration());
}

}  // namespace
}  // namespace shardd::comm::nccl
