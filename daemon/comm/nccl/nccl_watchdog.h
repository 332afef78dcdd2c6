#ifndef SHARDD_DAEMON_COMM_NCCL_NCCL_WATCHDOG_H_
#define SHARDD_DAEMON_COMM_NCCL_NCCL_WATCHDOG_H_

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "daemon/core/mono_time.h"

// The decisions of the NCCL backend's watchdog, as pure functions of what
// it polled and an injected clock: whether an operation (or a non-blocking
// NCCL call, or communicator init) is still running, finished, or must
// abort the communicator, and with which status. The backend's worker
// thread polls the CUDA event and ncclCommGetAsyncError, asks these
// functions, and acts; the CPU tests drive them with chosen times.
//
// Thread-safety: pure functions, thread-safe.
namespace shardd::comm::nccl {

// ncclResult_t's values (nccl.h); nccl_collective.cc static_asserts that
// they match, so that this file needs no CUDA headers.
enum class NcclResultCode : int {
  kSuccess = 0,
  kUnhandledCudaError = 1,
  kSystemError = 2,
  kInternalError = 3,
  kInvalidArgument = 4,
  kInvalidUsage = 5,
  kRemoteError = 6,
  kInProgress = 7,
};

absl::string_view NcclResultName(NcclResultCode code);

// The status of an NCCL error, `what` naming the operation:
//   ncclRemoteError, ncclSystemError (a peer died, the network failed)
//       -> UNAVAILABLE
//   ncclInvalidArgument, ncclInvalidUsage -> FAILED_PRECONDITION (for
//       example NCCL's "Duplicate GPU detected" at init)
//   ncclUnhandledCudaError, ncclInternalError, unknown codes -> INTERNAL
//   ncclSuccess -> OK; ncclInProgress -> INTERNAL (not an error; callers
//       must not ask).
absl::Status NcclResultToStatus(NcclResultCode code, absl::string_view what);

enum class WatchAction {
  kKeepWaiting,  // poll again after `next_poll`
  kDone,         // finished; `status` is OK
  kAbort,        // abort the communicator; fail with `status`
};

struct WatchDecision {
  WatchAction action = WatchAction::kKeepWaiting;
  absl::Status status;
  absl::Duration next_poll = absl::ZeroDuration();
};

// What the worker observed about the running operation at `now`.
struct OpPoll {
  MonoTime started;  // when the operation started running
  absl::Duration timeout;
  MonoTime now;
  // ncclCommGetAsyncError's result.
  NcclResultCode async_error = NcclResultCode::kSuccess;
  // cudaEventQuery of the event recorded after the operation's calls:
  // done, or an error other than "not ready" (cuda_error != 0).
  bool stream_done = false;
  int cuda_error = 0;
  // Non-OK once Abort(reason) was called (ABORTED with the reason).
  absl::Status abort_requested;
};

// In order: a requested abort; an asynchronous NCCL error (the
// communicator is broken even if this operation's kernels finished); a CUDA
// error; completion; the deadline (DEADLINE_EXCEEDED, inclusive: at
// started + timeout the operation has had its time); else keep waiting.
WatchDecision DecideOp(absl::string_view what, const OpPoll& poll);

// A non-blocking NCCL call (communicator init, or a call or ncclGroupEnd
// that returned ncclInProgress) until ncclCommGetAsyncError leaves
// ncclInProgress: ncclSuccess -> done; ncclInProgress before the deadline ->
// keep waiting, at or past it -> abort with DEADLINE_EXCEEDED; any error ->
// abort with NcclResultToStatus. A requested abort wins.
struct PendingPoll {
  MonoTime started;
  absl::Duration timeout;
  MonoTime now;
  NcclResultCode async_error = NcclResultCode::kInProgress;
  absl::Status abort_requested;
};

WatchDecision DecidePending(absl::string_view what, const PendingPoll& poll);

// How long to sleep between polls, given how long the operation has run:
// 10 µs at first (small collectives finish in tens of microseconds),
// growing with the elapsed time to at most 1 ms (the reaction time to a
// deadline or an abort), and never past `remaining`.
absl::Duration NextPollDelay(absl::Duration elapsed, absl::Duration remaining);

}  // namespace shardd::comm::nccl

#endif  // SHARDD_DAEMON_COMM_NCCL_NCCL_WATCHDOG_H_
