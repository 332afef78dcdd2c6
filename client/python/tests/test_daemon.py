"""The Python client against real processes: a coordinator and one shardd.

W = 1 (F = 1): a model of two fp32 units with SGD, registered from Python
with its initial values inline; one step driven the way a trainer drives it
(forward gathers, backward gathers with gradients written into the daemon's
slot through torch views, ReduceGrad, Step), then the parameters gathered
again must be p - lr * g exactly. Once with fp32 gathered parameters, and
once each with bf16 and fp16 ones (param_dtype; fp32 masters), where the
views are 16-bit, the gradient is written in 16 bits, and the expected
values are the fp32 update rounded to the 16-bit type.

Why exactly: lr = 0.5 is a power of two, so lr * g is exact in fp32 and
p - lr * g is a single rounding however the daemon's kernel groups it (with
or without a fused multiply-add); W = 1 averages over one rank (a factor of
1) and clipping is off; fp32 -> 16-bit conversions round to nearest even on
both sides.

The binaries come from Bazel (bazel build //daemon/coordinator:coordinator
//daemon/node:shardd): $SHARDD_BIN_DIR, else the workspace's bazel-bin.
Without them the test is skipped, unless SHARDD_REQUIRE_DAEMON=1 (set by
scripts/test, which builds them first) makes that a failure. Every child
process is killed when the test ends, however it ends; every wait has a
deadline and polls (no sleep stands in for synchronisation).
"""

import os
import re
import signal
import subprocess
import time

import grpc
import pytest
import torch

from conftest import REPO
from shardd import client as shardd_client
from shardd import errors as shardd_errors
from shardd.v1 import common_pb2, trainer_pb2

BIN_DIR = os.environ.get("SHARDD_BIN_DIR", os.path.join(REPO, "bazel-bin"))
COORDINATOR = os.path.join(BIN_DIR, "daemon/coordinator/coordinator")
SHARDD = os.path.join(BIN_DIR, "daemon/node/shardd")
LR = 0.5
START_SECONDS = 30  # Deadline for each process to come up.
RPC_SECONDS = 30  # Deadline of each call (a W = 1 step takes milliseconds).

# Unit name -> [(tensor name, shape)], in the model's order.
MODEL = {
    "layer0": [("weight", (4, 3)), ("bias", (4,))],
    "head": [("weight", (2, 4))],
}


def poll(condition, seconds, what, procs=()):
    """Polls `condition` until true; fails naming `what` at the deadline.

    Fails at once when one of `procs` (name, Popen) exits meanwhile.
    """
    deadline = time.monotonic() + seconds
    while True:
        value = condition()
        if value:
            return value
        for name, proc in procs:
            if proc.poll() is not None:
                pytest.fail(f"{name} exited with {proc.returncode} while "
                            f"waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {seconds} s")
        time.sleep(0.02)


class Cluster:
    """The child processes of one test and their logs."""

    def __init__(self, directory):
        self.dir = directory
        self.procs = []

    def start(self, name, argv, env=None):
        """Starts `argv` logging to NAME.log; `env`: its environment (None:
        this process's)."""
        log = open(os.path.join(self.dir, f"{name}.log"), "wb")  # pylint: disable=consider-using-with
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                env=env)
        log.close()  # The child has its own descriptor.
        self.procs.append((name, proc))
        return proc

    def log(self, name):
        with open(os.path.join(self.dir, f"{name}.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def stop(self):
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        for _, proc in self.procs:
            proc.wait(timeout=30)
        for name, _ in self.procs:
            # Shown by pytest only when the test failed.
            print(f"----- {name}.log\n{self.log(name)[-4000:]}")


def start_single_rank_job(c, directory):
    """Starts a W = 1 coordinator in Cluster `c`; the shardd argv for it
    (rank 0, its socket and shm in `directory`) and the socket's path."""
    coord = c.start("coordinator", [
        COORDINATOR, "--listen=127.0.0.1:0", "--world_size=1",
        "--sharding_factor=1"
    ])
    match = poll(
        lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                          c.log("coordinator")), START_SECONDS,
        "coordinator port", [("coordinator", coord)])
    socket = os.path.join(directory, "s0.sock")
    argv = [
        SHARDD, f"--coordinator=127.0.0.1:{match.group(1)}",
        "--identity=node-0", "--rank=0", f"--listen_unix={socket}",
        f"--shm_dir={directory}"
    ]
    return argv, socket


@pytest.fixture
def cluster(tmp_path):
    if not (os.access(COORDINATOR, os.X_OK) and os.access(SHARDD, os.X_OK)):
        message = (f"no daemon binaries in {BIN_DIR} (bazel build "
                   "//daemon/coordinator:coordinator //daemon/node:shardd)")
        if os.environ.get("SHARDD_REQUIRE_DAEMON") == "1":
            pytest.fail(message)
        pytest.skip(message)
    c = Cluster(str(tmp_path))
    try:
        argv, socket = start_single_rank_job(c, str(tmp_path))
        c.start("shardd", argv)
        poll(lambda: os.path.exists(socket), START_SECONDS, "shardd socket",
             c.procs)
        yield socket
    finally:
        c.stop()


def model_spec(values, param_dtype):
    """The ModelSpec of MODEL with `values` ({(unit, tensor): fp32}) inline."""
    spec = common_pb2.ModelSpec()
    for unit_name, tensors in MODEL.items():
        unit = spec.units.add(name=unit_name)
        for name, shape in tensors:
            tensor = unit.tensors.add(name=name, shape=list(shape),
                                      dtype=common_pb2.DTYPE_FP32)
            tensor.init.values.data = values[unit_name,
                                             name].numpy().tobytes()
    config = spec.config
    config.strategy = common_pb2.SHARDING_STRATEGY_FULL_SHARD
    config.optimizer.sgd.lr = LR
    config.param_dtype = param_dtype
    return spec


PARAM_DTYPES = {
    common_pb2.DTYPE_FP32: torch.float32,
    common_pb2.DTYPE_BF16: torch.bfloat16,
    common_pb2.DTYPE_FP16: torch.float16,
}


@pytest.mark.parametrize("param_dtype", list(PARAM_DTYPES),
                         ids=lambda d: common_pb2.DType.Name(d))
def test_one_sgd_step_through_the_python_client(cluster, param_dtype):
    low = PARAM_DTYPES[param_dtype]
    generator = torch.Generator().manual_seed(19)
    params = {(u, n): torch.randn(shape, generator=generator)
              for u, tensors in MODEL.items() for n, shape in tensors}
    grads = {key: torch.randn(p.shape, generator=generator)
             for key, p in params.items()}
    units = list(MODEL)

    with shardd_client.TrainerClient(cluster,
                                     default_timeout=RPC_SECONDS) as client:
        client.wait_connected(timeout=START_SECONDS)
        request = trainer_pb2.RegisterModelRequest(
            model=model_spec(params, param_dtype),
            transport=common_pb2.TRANSPORT_SHARED_MEMORY)
        registered = client.register_model(request, timeout=60)
        assert registered.committed_step == 0 and not registered.reattached
        client.wait_ready()

        # Forward: the daemon's parameters, read through read-only views.
        for i, unit in enumerate(units):
            gathered = client.gather(i, shardd_client.FORWARD)
            assert gathered.grad is None
            assert not gathered.params.writable
            assert gathered.params.flat.dtype == low
            for name, _ in MODEL[unit]:
                assert torch.equal(gathered.params.tensor(name),
                                   params[unit, name].to(low)), (unit, name)
            client.release(i, shardd_client.FORWARD)

        # Backward, last unit first: write each gradient into the slot.
        for i in reversed(range(len(units))):
            unit = units[i]
            gathered = client.gather(i, shardd_client.BACKWARD)
            assert gathered.grad is not None and gathered.grad.writable
            assert gathered.grad.flat.dtype == low
            for name, _ in MODEL[unit]:
                gathered.grad.tensor(name).copy_(grads[unit, name].to(low))
            reduced = client.reduce_grad(i, gathered.grad)
            assert reduced.reduce_started
            client.release(i, shardd_client.BACKWARD)

        stepped = client.step(1)
        assert stepped.committed_step == 1
        assert stepped.learning_rate == LR

        for i, unit in enumerate(units):
            gathered = client.gather(i, shardd_client.FORWARD)
            assert gathered.response.committed_step == 1
            for name, _ in MODEL[unit]:
                # The daemon reduces and applies what the slot held.
                grad = grads[unit, name].to(low).float()
                expected = (params[unit, name] - LR * grad).to(low)
                assert torch.equal(gathered.params.tensor(name),
                                   expected), (unit, name)
            client.release(i, shardd_client.FORWARD)

        # A restarted trainer re-attaches: same model, the daemon's step.
        again = client.register_model(request, timeout=60)
        assert again.reattached and again.committed_step == 1
        assert client.get_status().committed_step == 1


def test_a_second_trainer_process_supersedes_the_first(cluster):
    """Two trainer processes on one daemon (a stale one still running, a new
    one started): the newest registration wins; the older client's calls
    are refused by name instead of interleaving with the newer's steps."""
    generator = torch.Generator().manual_seed(23)
    params = {(u, n): torch.randn(shape, generator=generator)
              for u, tensors in MODEL.items() for n, shape in tensors}
    request = trainer_pb2.RegisterModelRequest(
        model=model_spec(params, common_pb2.DTYPE_FP32),
        transport=common_pb2.TRANSPORT_SHARED_MEMORY)
    with shardd_client.TrainerClient(cluster,
                                     default_timeout=RPC_SECONDS) as old, \
            shardd_client.TrainerClient(cluster,
                                        default_timeout=RPC_SECONDS) as new:
        old.wait_connected(timeout=START_SECONDS)
        first = old.register_model(request, timeout=60)
        old.wait_ready()
        old.release(0, shardd_client.FORWARD)  # Accepted: the current one.
        second = new.register_model(request, timeout=60)
        assert second.reattached
        assert first.attachment != 0 and second.attachment != 0
        assert second.attachment != first.attachment
        with pytest.raises(shardd_errors.ShardError) as refused:
            old.gather(0, shardd_client.FORWARD)
        assert refused.value.code == grpc.StatusCode.FAILED_PRECONDITION
        assert "superseded" in str(refused.value)
        with pytest.raises(shardd_errors.ShardError):
            old.wait_ready()
        new.wait_ready()
        gathered = new.gather(0, shardd_client.FORWARD)
        assert gathered.response.committed_step == 0
        new.release(0, shardd_client.FORWARD)
