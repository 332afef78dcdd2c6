"""gRPC statuses become the exception classes of shardd.errors, by code.

Checked both on the mapping itself and end to end: a TrainerClient calling
an in-process Trainer server (on a Unix socket, as the daemon serves) that
fails with each code, and a client whose deadline passes.
"""

import os
import threading
import time
from concurrent import futures

import grpc
import pytest

from shardd import errors
from shardd.client import TrainerClient
from shardd.v1 import trainer_pb2, trainer_pb2_grpc

SPECIAL = {
    grpc.StatusCode.ABORTED: errors.StepAborted,
    grpc.StatusCode.UNAVAILABLE: errors.DaemonUnavailable,
    # The client never cancels a call: the daemon's server did (stopping).
    grpc.StatusCode.CANCELLED: errors.DaemonUnavailable,
}


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode
                                  if c != grpc.StatusCode.OK])
def test_each_code_maps_to_its_class(code):
    error = errors.from_status(code, "why")
    expected = SPECIAL.get(code, errors.ShardError)
    assert type(error) is expected  # pylint: disable=unidiomatic-typecheck
    assert isinstance(error, errors.ShardError)
    assert error.code == code
    assert error.message == "why"


def test_only_the_marked_data_loss_is_a_job_failure():
    assert type(errors.from_status(  # pylint: disable=unidiomatic-typecheck
        grpc.StatusCode.DATA_LOSS, "lost", job_failed=True)) is errors.JobFailed
    # A corrupt load_from file: DATA_LOSS, but the call's own.
    assert type(errors.from_status(  # pylint: disable=unidiomatic-typecheck
        grpc.StatusCode.DATA_LOSS, "cut")) is errors.ShardError
    # The mark means nothing on another code.
    assert type(errors.from_status(  # pylint: disable=unidiomatic-typecheck
        grpc.StatusCode.ABORTED, "x", job_failed=True)) is errors.StepAborted


def test_the_classes_are_distinct():
    classes = set(SPECIAL.values()) | {errors.JobFailed}
    assert len(classes) == 3
    for cls in classes:
        assert issubclass(cls, errors.ShardError)
        assert all(not issubclass(cls, other)
                   for other in classes if other is not cls)


def test_message_text_does_not_decide_the_class():
    # A message that reads like a job failure is still only its code's.
    error = errors.from_status(grpc.StatusCode.FAILED_PRECONDITION,
                               "the job has FAILED: DATA_LOSS aborted")
    assert type(error) is errors.ShardError  # pylint: disable=unidiomatic-typecheck


def test_the_clients_own_data_loss_is_not_a_job_failure():
    error = errors.SegmentError(grpc.StatusCode.DATA_LOSS, "short file")
    assert not isinstance(error, errors.JobFailed)
    assert isinstance(error, errors.ShardError)


class _FailingTrainer(trainer_pb2_grpc.TrainerServicer):
    """Fails Step with the code it is told; Gather blocks until released."""

    def __init__(self):
        self.code = grpc.StatusCode.ABORTED
        self.job_failed = False
        self.release = threading.Event()

    def Step(self, request, context):
        if self.job_failed:
            context.set_trailing_metadata(((errors.JOB_FAILED_TRAILER, "1"),))
        context.abort(self.code, f"step {request.step}: {self.code.name}")

    def GetStatus(self, request, context):
        return trainer_pb2.GetStatusResponse(rank=7)

    def WatchEvents(self, request, context):
        yield trainer_pb2.TrainerEvent(sequence=request.after_sequence + 1)
        # Then nothing until the client's deadline ends the stream.
        self.release.wait(timeout=30)

    def Gather(self, request, context):
        # Outlives the client's deadline; bounded so the server can stop.
        self.release.wait(timeout=30)
        context.abort(grpc.StatusCode.INTERNAL, "released")


@pytest.fixture
def fake_daemon(tmp_path):
    servicer = _FailingTrainer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trainer_pb2_grpc.add_TrainerServicer_to_server(servicer, server)
    socket = str(tmp_path / "t.sock")
    server.add_insecure_port(f"unix:{socket}")
    server.start()
    yield socket, servicer
    servicer.release.set()
    server.stop(grace=None)


def test_a_server_status_reaches_the_caller_as_its_class(fake_daemon):
    socket, servicer = fake_daemon
    with TrainerClient(socket, default_timeout=10) as client:
        assert client.get_status().rank == 7
        for code in [grpc.StatusCode.ABORTED, grpc.StatusCode.UNAVAILABLE,
                     grpc.StatusCode.CANCELLED, grpc.StatusCode.DATA_LOSS,
                     grpc.StatusCode.FAILED_PRECONDITION,
                     grpc.StatusCode.INVALID_ARGUMENT]:
            servicer.code = code
            with pytest.raises(errors.ShardError) as raised:
                client.step(3)
            assert type(raised.value) is SPECIAL.get(  # pylint: disable=unidiomatic-typecheck
                code, errors.ShardError)
            assert raised.value.code == code
            assert raised.value.message == f"step 3: {code.name}"
        # The job's terminal DATA_LOSS carries the daemon's mark.
        servicer.code = grpc.StatusCode.DATA_LOSS
        servicer.job_failed = True
        with pytest.raises(errors.JobFailed):
            client.step(3)


def test_every_call_has_a_deadline(fake_daemon):
    socket, _ = fake_daemon
    with TrainerClient(socket, default_timeout=0.3) as client:
        start = time.monotonic()
        with pytest.raises(errors.ShardError) as raised:
            client.gather(0)
        assert raised.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - start < 5
        # A per-call timeout overrides the default.
        start = time.monotonic()
        with pytest.raises(errors.ShardError):
            client.gather(0, timeout=0.1)
        assert time.monotonic() - start < 5


def test_no_daemon_at_the_socket_is_daemon_unavailable(tmp_path):
    socket = str(tmp_path / "nobody.sock")
    assert not os.path.exists(socket)
    with TrainerClient(socket, default_timeout=2) as client:
        with pytest.raises(errors.DaemonUnavailable) as raised:
            client.get_status()
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(errors.DaemonUnavailable):
            client.wait_connected(timeout=0.2)


def test_an_event_stream_ends_at_its_deadline(fake_daemon):
    socket, _ = fake_daemon
    with TrainerClient(socket, default_timeout=10) as client:
        events = []
        start = time.monotonic()
        with pytest.raises(errors.ShardError) as raised:
            for event in client.watch_events(after_sequence=4, timeout=0.5):
                events.append(event.sequence)
        assert events == [5]
        assert raised.value.code == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - start < 5
