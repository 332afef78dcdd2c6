#include "daemon/comm/nccl/nccl_watchdog.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace shardd::comm::nccl {
namespace {

constexpr absl::Duration kMinPoll = absl::Microseconds(10);
constexpr absl::Duration kMaxPoll = absl::Milliseconds(1);

bool IsError(NcclResultCode code) {
  return code != NcclResultCode::kSuccess &&
         code != NcclResultCode::kInProgress;
}

WatchDecision Abort(absl::Status status) {
  return WatchDecision{WatchAction::kAbort, std::move(status),
                       absl::ZeroDuration()};
}

WatchDecision KeepWaiting(absl::Duration elapsed, absl::Duration timeout) {
  return WatchDecision{WatchAction::kKeepWaiting, absl::OkStatus(),
                       NextPollDelay(elapsed, timeout - elapsed)};
}

}  // namespace

absl::string_view NcclResultName(NcclResultCode code) {
  switch (code) {
    case NcclResultCode::kSuccess:
      return "ncclSuccess";
    case NcclResultCode::kUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case NcclResultCode::kSystemError:
      return "ncclSystemError";
    case NcclResultCode::kInternalError:
      return "ncclInternalError";
    case NcclResultCode::kInvalidArgument:
      return "ncclInvalidArgument";
    case NcclResultCode::kInvalidUsage:
      return "ncclInvalidUsage";
    case NcclResultCode::kRemoteError:
      return "ncclRemoteError";
    case NcclResultCode::kInProgress:
      return "ncclInProgress";
  }
  return "unknown ncclResult_t";
}

absl::Status NcclResultToStatus(NcclResultCode code, absl::string_view what) {
  const std::string message = absl::StrCat(what, ": ", NcclResultName(code),
                                           " (", static_cast<int>(code), ")");
  switch (code) {
    case NcclResultCode::kSuccess:
      return absl::OkStatus();
    case NcclResultCode::kRemoteError:
    case NcclResultCode::kSystemError:
      return absl::UnavailableError(
          absl::StrCat(message, ": a peer failed or the network did"));
    case NcclResultCode::kInvalidArgument:
    case NcclResultCode::kInvalidUsage:
      return absl::FailedPreconditionError(message);
    case NcclResultCode::kUnhandledCudaError:
    case NcclResultCode::kInternalError:
    case NcclResultCode::kInProgress:
      break;
  }
  return absl::InternalError(message);
}

WatchDecision DecideOp(absl::string_view what, const OpPoll& poll) {
  if (!poll.abort_requested.ok()) return Abort(poll.abort_requested);
  if (IsError(poll.async_error)) {
    return Abort(NcclResultToStatus(poll.async_error, what));
  }
  if (poll.cuda_error != 0) {
    return Abort(
        absl::InternalError(absl::StrCat(what, ": CUDA error ", poll.cuda_error,
                                         " while waiting for the stream")));
  }
  if (poll.stream_done) {
    return WatchDecision{WatchAction::kDone, absl::OkStatus(),
                         absl::ZeroDuration()};
  }
  const absl::Duration elapsed = poll.now - poll.started;
  if (elapsed >= poll.timeout) {
    return Abort(absl::DeadlineExceededError(
        absl::StrCat(what, ": did not finish within its deadline of ",
                     absl::FormatDuration(poll.timeout),
                     " (a peer is slow, hung or gone)")));
  }
  return KeepWaiting(elapsed, poll.timeout);
}

WatchDecision DecidePending(absl::string_view what, const PendingPoll& poll) {
  if (!poll.abort_requested.ok()) return Abort(poll.abort_requested);
  if (poll.async_error == NcclResultCode::kSuccess) {
    return WatchDecision{WatchAction::kDone, absl::OkStatus(),
                         absl::ZeroDuration()};
  }
  if (poll.async_error != NcclResultCode::kInProgress) {
    return Abort(NcclResultToStatus(poll.async_error, what));
  }
  const absl::Duration elapsed = poll.now - poll.started;
  if (elapsed >= poll.timeout) {
    return Abort(absl::DeadlineExceededError(absl::StrCat(
        what, ": still in progress after ", absl::FormatDuration(poll.timeout),
        " (a peer is slow, hung or gone)")));
  }
  return KeepWaiting(elapsed, poll.timeout);
}

absl::Duration NextPollDelay(absl::Duration elapsed, absl::Duration remaining) {
  absl::Duration delay = std::clamp(elapsed / 16, kMinPoll, kMaxPoll);
  if (remaining < delay) delay = std::max(remaining, absl::ZeroDuration());
  return delay;
}

}  // namespace shardd::comm::nccl
