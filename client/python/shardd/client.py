"""TrainerClient: a typed Python client of a shardd daemon's Trainer service.

The Python counterpart of client/trainer_client.h. It owns one gRPC channel
to the daemon (a Unix socket by default) and one SegmentCache; every call
carries a deadline (the client's default unless the caller passes one), and
every failure is raised as the exception of shardd.errors that says how to
react (StepAborted, DaemonUnavailable, JobFailed, ShardError).

Gather maps the buffers its reply names and returns torch-ready views
(shardd.segments): the parameters read-only, the BACKWARD gradient slot
writable. The API's semantics (ordering of calls, idempotency, status codes)
are documented in proto/shardd/v1/trainer.proto and not repeated here.

Thread-safety: calls may be made from several threads at once (gRPC stubs
and the segment cache are thread-safe).
"""

import grpc

from shardd import errors
from shardd.segments import BufferView, SegmentCache
from shardd.v1 import common_pb2
from shardd.v1 import trainer_pb2
from shardd.v1 import trainer_pb2_grpc

FORWARD = trainer_pb2.PASS_FORWARD
BACKWARD = trainer_pb2.PASS_BACKWARD

# Replies are small (data travels through shared memory), but tools may ask
# for inline data: lift the 4 MiB default on receive, as the C++ client does.
_MAX_RECEIVE_BYTES = 256 << 20


def normalize_target(target):
    """'unix:/a/b' for '/a/b' (a socket path); anything else unchanged."""
    return f"unix:{target}" if target.startswith("/") else target


class GatheredUnit:
    """A unit gathered by the daemon.

    Attributes:
      unit: its index in the registered model.
      params: read-only BufferView of the gathered parameters.
      grad: writable BufferView of the gradient slot (BACKWARD gathers), the
        buffer to fill before reduce_grad; None for FORWARD.
      response: the GatherResponse as received.
    """

    def __init__(self, unit, params, grad, response):
        self.unit = unit
        self.params = params
        self.grad = grad
        self.response = response


class TrainerClient:
    """Client of one shardd daemon's Trainer service.

    Args:
      target: the daemon's Unix socket path ('/run/shardd.sock'), or any gRPC
        target ('unix:/path', 'host:port').
      default_timeout: seconds; the deadline of every call that passes none.
      register_timeout: seconds; RegisterModel waits for every rank, so it
        gets a longer default.

    Creating the client does not connect; the first call (or
    wait_connected) does. Use it as a context manager, or call close().
    """

    def __init__(self, target, default_timeout=30.0, register_timeout=120.0):
        if not target:
            raise ValueError("target: must not be empty")
        if default_timeout <= 0 or register_timeout <= 0:
            raise ValueError("timeouts must be > 0")
        self.target = normalize_target(target)
        self.default_timeout = default_timeout
        self.register_timeout = register_timeout
        self.segments = SegmentCache()
        self._channel = grpc.insecure_channel(
            self.target,
            options=[
                ("grpc.max_receive_message_length", _MAX_RECEIVE_BYTES),
                # Reconnect quickly to a restarted or replacement daemon.
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ])
        self._stub = trainer_pb2_grpc.TrainerStub(self._channel)
        # RegisterModelResponse.attachment of the last registration, sent
        # with every call so that the daemon refuses this process's calls
        # once another trainer process has registered (0: none yet).
        self._attachment = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def close(self):
        """Closes the channel and unmaps every segment no view still uses."""
        self.segments.close()
        self._channel.close()

    def _call(self, method, request, timeout, default=None):
        """Runs a unary call with a deadline; raises shardd.errors classes."""
        if timeout is None:
            timeout = self.default_timeout if default is None else default
        metadata = ()
        if self._attachment:
            metadata = (("shardd-attachment", f"{self._attachment:016x}"),)
        try:
            return method(request, timeout=timeout, metadata=metadata)
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None

    def wait_connected(self, timeout=None):
        """Blocks until the channel is connected; DaemonUnavailable if not."""
        timeout = self.default_timeout if timeout is None else timeout
        ready = grpc.channel_ready_future(self._channel)
        try:
            ready.result(timeout=timeout)
        except grpc.FutureTimeoutError:
            ready.cancel()  # Stops watching the channel's state.
            raise errors.DaemonUnavailable(
                grpc.StatusCode.UNAVAILABLE,
                f"no shardd daemon at {self.target} (not connected within "
                f"{timeout} s)") from None

    def register_model(self, request, timeout=None):
        """RegisterModel; `request` is a RegisterModelRequest or ModelSpec.

        A new registration (after a recovery, the replacement daemon's) hands
        out new buffers: the cached mappings are dropped first, so that a
        dead daemon's unlinked memory is really freed (views still in use
        keep theirs).
        """
        if isinstance(request, common_pb2.ModelSpec):
            request = trainer_pb2.RegisterModelRequest(model=request)
        self.segments.clear()
        response = self._call(self._stub.RegisterModel, request, timeout,
                              default=self.register_timeout)
        self._attachment = response.attachment
        return response

    def gather(self, unit, pass_=FORWARD, prefetch=(), timeout=None,
               release_first=()):
        """Gathers `unit` (with prefetch hints) and maps its buffers.

        `release_first`: (unit, pass) pairs the daemon releases before it
        gathers, as release() would, in the same call.

        Returns a GatheredUnit; raises SegmentError when the reply's
        buffers cannot be mapped as described.
        """
        # `pass` is a Python keyword: the field is set by name.
        request = trainer_pb2.GatherRequest(
            unit=unit, prefetch=list(prefetch), **{"pass": pass_},
            release_first=[
                trainer_pb2.ReleaseRequest(unit=u, **{"pass": p})
                for u, p in release_first
            ])
        response = self._call(self._stub.Gather, request, timeout)
        params = self.segments.read_view(response.params, "params")
        grad = None
        if response.HasField("grad_buffer"):
            grad = self.segments.write_view(response.grad_buffer,
                                            "grad_buffer")
        elif pass_ == BACKWARD:
            raise errors.SegmentError(
                grpc.StatusCode.DATA_LOSS,
                f"Gather(unit {unit}, BACKWARD): the reply has no grad_buffer")
        return GatheredUnit(unit, params, grad, response)

    def release(self, unit, pass_=FORWARD, reshard=False, timeout=None):
        request = trainer_pb2.ReleaseRequest(unit=unit, reshard=reshard,
                                             **{"pass": pass_})
        return self._call(self._stub.Release, request, timeout)

    def reduce_grad(self, unit, grad, accumulate_only=False, timeout=None,
                    release=False):
        """Hands the daemon the gradient of `unit`.

        `grad` is the BufferView of a BACKWARD gather's slot (after writing
        it), or any DataRef (a trainer-owned segment, inline bytes).
        `release`: the daemon then releases the unit (BACKWARD) in the same
        call.
        """
        ref = grad.ref if isinstance(grad, BufferView) else grad
        request = trainer_pb2.ReduceGradRequest(
            unit=unit, grad=ref, accumulate_only=accumulate_only,
            release=release)
        return self._call(self._stub.ReduceGrad, request, timeout)

    def step(self, step, learning_rate=None, timeout=None):
        request = trainer_pb2.StepRequest(step=step)
        if learning_rate is not None:
            request.learning_rate = learning_rate
        return self._call(self._stub.Step, request, timeout)

    def wait_ready(self, min_epoch=0, timeout=None):
        return self._call(self._stub.WaitReady,
                          trainer_pb2.WaitReadyRequest(min_epoch=min_epoch),
                          timeout)

    def export_state(self, request, timeout=None):
        return self._call(self._stub.ExportState, request, timeout)

    def check_memory(self, request, timeout=None):
        return self._call(self._stub.CheckMemory, request, timeout)

    def get_status(self, timeout=None):
        return self._call(self._stub.GetStatus,
                          trainer_pb2.GetStatusRequest(), timeout)

    def watch_events(self, after_sequence=0, timeout=None):
        """Yields TrainerEvents until `timeout` seconds have passed.

        The stream's end by its deadline is an error like any other
        (ShardError with DEADLINE_EXCEEDED); break out of the loop to stop
        earlier (the call is cancelled then).
        """
        timeout = self.default_timeout if timeout is None else timeout
        call = self._stub.WatchEvents(
            trainer_pb2.WatchEventsRequest(after_sequence=after_sequence),
            timeout=timeout)
        try:
            for event in call:
                yield event
        except grpc.RpcError as e:
            raise errors.from_rpc_error(e) from None
        finally:
            call.cancel()
