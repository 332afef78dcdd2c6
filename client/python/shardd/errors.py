"""Exceptions of the shardd Python client, one class per way to react.

The Trainer API tells its outcomes apart by gRPC status code
(proto/shardd/v1/common.proto, trainer.proto); this module turns a failed
call into an exception whose class says what the trainer should do, so that
callers write `except StepAborted:` instead of comparing codes or, worse,
messages:

  StepAborted        ABORTED: a peer failed or the epoch changed; nothing of
                     the step was applied. WaitReady, then redo the step.
  DaemonUnavailable  UNAVAILABLE: nothing answers at the socket (the daemon
                     died or is being replaced), or the daemon could not reach
                     the coordinator; and CANCELLED, which this client never
                     causes: the daemon's server cancels the calls it will
                     not run when it stops (SIGTERM). Re-attach
                     (RegisterModel with the same model): it is idempotent,
                     so it is right in every case.
  JobFailed          DATA_LOSS that the daemon marks as the job's (trailing
                     metadata "shardd-job-failed"): the job has failed for
                     good (terminal). Do not retry; exit non-zero with the
                     reason. A DATA_LOSS without the mark (a corrupt
                     load_from file) is a plain ShardError.
  ShardError         everything else (the base class of all of them), with
                     the code and the message.

Only a status that came from the daemon is a JobFailed. The client's own
checks of the daemon's replies (SegmentError, e.g. a segment shorter than
announced) may carry DATA_LOSS too, but they are a different class, as the
C++ client marks only the daemon's DATA_LOSS as the job's (IsJobFailed).
"""

import grpc


class ShardError(Exception):
    """A call to shardd failed: `code` (a grpc.StatusCode) and `message`."""

    def __init__(self, code, message):
        super().__init__(f"{code.name}: {message}")
        self.code = code
        self.message = message


class StepAborted(ShardError):
    """ABORTED: the step was not applied; wait for readiness and redo it."""


class DaemonUnavailable(ShardError):
    """UNAVAILABLE: the daemon is gone or cannot serve; re-attach."""


class JobFailed(ShardError):
    """The daemon's DATA_LOSS: the job has failed for good; `message` says why."""


class SegmentError(ShardError):
    """A DataRef the client cannot map or view (the client's own check).

    Codes as the C++ SegmentCache: INVALID_ARGUMENT (a range, dtype or view
    that does not fit, naming the field), NOT_FOUND (no such file),
    DATA_LOSS (the file is shorter than the reply says), UNIMPLEMENTED
    (inline data or a CUDA buffer, which this client does not map).
    """


# The daemon's codes that call for their own reaction; any other is a
# ShardError (DATA_LOSS is JobFailed only with the daemon's mark).
_CLASS_BY_CODE = {
    grpc.StatusCode.ABORTED: StepAborted,
    grpc.StatusCode.UNAVAILABLE: DaemonUnavailable,
    grpc.StatusCode.CANCELLED: DaemonUnavailable,
}

# The trailing metadata key the daemon adds to the job's terminal DATA_LOSS
# (daemon/rpc/grpc_status.h kJobFailedTrailer).
JOB_FAILED_TRAILER = "shardd-job-failed"


def from_status(code, message, job_failed=False):
    """The exception for a status the daemon (or the channel) returned.

    `job_failed`: the daemon marked it as the job's terminal status.
    """
    if code == grpc.StatusCode.DATA_LOSS and job_failed:
        return JobFailed(code, message)
    return _CLASS_BY_CODE.get(code, ShardError)(code, message)


def from_rpc_error(error):
    """The exception for a grpc.RpcError raised by a stub call."""
    # Every RpcError a unary or streaming call raises is also a grpc.Call
    # with code() and details(); anything else is a bug of ours.
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    details = error.details() if hasattr(error, "details") else str(error)
    trailers = (error.trailing_metadata() or ()) if hasattr(
        error, "trailing_metadata") else ()
    job_failed = any(key == JOB_FAILED_TRAILER for key, _ in trailers)
    return from_status(code, details or "", job_failed=job_failed)
