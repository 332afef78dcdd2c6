"""The README's PyTorch example (examples/quickstart.py), so that it cannot rot.

The README shows the file itself: the first test checks that README.md
holds it verbatim in a ```python block. The second runs it as the README
says, one process per rank against a coordinator and W = 2 shardd daemons
(FULL_SHARD, F = 2), and checks that every rank commits all of its steps
and that the loss falls: the example learns a linear function, so the
loss at the last step is well below a quarter of the first step's (here it
falls from ~4 to ~0.1; the bound leaves room for the per-rank halves of
the batch). The third fails the job (W/F = 1: a daemon killed and
replaced finds its shard lost) and checks that the example exits 2 with
the reason, as train_gpt.py does. Every wait has a deadline and every
process is killed when the test ends (test_daemon.Cluster).
"""

import os
import re
import signal
import sys

import pytest

from conftest import REPO
from test_daemon import COORDINATOR, SHARDD, START_SECONDS, Cluster, poll

EXAMPLE = os.path.join(REPO, "client", "python", "examples", "quickstart.py")
WORLD_SIZE = 2
STEPS = 60  # The example's `steps`.
RUN_SECONDS = 120  # Deadline for the trainers (a few seconds when quiet).


def test_readme_shows_the_example_verbatim():
    with open(EXAMPLE, encoding="utf-8") as f:
        example = f.read()
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    assert f"```python\n{example}```\n" in readme, (
        "README.md must show client/python/examples/quickstart.py verbatim "
        "in a ```python block; copy the file into it")


def _require_binaries():
    if not (os.access(COORDINATOR, os.X_OK) and os.access(SHARDD, os.X_OK)):
        message = (f"no daemon binaries ({COORDINATOR}; bazel build "
                   "//daemon/coordinator:coordinator //daemon/node:shardd)")
        if os.environ.get("SHARDD_REQUIRE_DAEMON") == "1":
            pytest.fail(message)
        pytest.skip(message)


def _start_daemon(c, tmp_path, port, rank, name):
    """Starts shardd of `rank` (log NAME.log); returns its socket."""
    socket = str(tmp_path / f"s{rank}.sock")
    shm = tmp_path / f"shm{rank}"
    shm.mkdir(exist_ok=True)
    c.start(name, [
        SHARDD, f"--coordinator=127.0.0.1:{port}", f"--identity=node-{rank}",
        f"--rank={rank}", f"--listen_unix={socket}", f"--shm_dir={shm}"
    ])
    return socket


def _start_job(c, tmp_path):
    """A coordinator, WORLD_SIZE daemons and the example on every rank, as
    the README runs them; returns (coordinator port, daemons, trainers)."""
    coord = c.start("coordinator", [
        COORDINATOR, "--listen=127.0.0.1:0", f"--world_size={WORLD_SIZE}",
        f"--sharding_factor={WORLD_SIZE}"
    ])
    match = poll(
        lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                          c.log("coordinator")), START_SECONDS,
        "coordinator port", [("coordinator", coord)])
    port = match.group(1)
    sockets = [_start_daemon(c, tmp_path, port, rank, f"shardd{rank}")
               for rank in range(WORLD_SIZE)]
    poll(lambda: all(os.path.exists(s) for s in sockets), START_SECONDS,
         "shardd sockets", c.procs)
    daemons = list(c.procs)
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "client", "python"),
               PYTHONUNBUFFERED="1")
    trainers = [(f"trainer{rank}", c.start(
        f"trainer{rank}",
        [sys.executable, EXAMPLE, sockets[rank], str(rank),
         str(WORLD_SIZE)], env=env)) for rank in range(WORLD_SIZE)]
    return port, daemons, trainers


def test_quickstart_trains_on_two_ranks_and_the_loss_falls(tmp_path):
    _require_binaries()
    c = Cluster(str(tmp_path))
    try:
        _, daemons, trainers = _start_job(c, tmp_path)
        poll(lambda: all(p.poll() is not None for _, p in trainers),
             RUN_SECONDS, "end of the trainers", daemons)
        for name, proc in trainers:
            log = c.log(name)
            assert proc.returncode == 0, (
                f"{name} exited with {proc.returncode}:\n{log[-3000:]}")
            losses = {int(m.group(1)): float(m.group(2)) for m in
                      re.finditer(r"^step (\d+) loss (\S+)$", log, re.M)}
            assert sorted(losses) == list(range(1, STEPS + 1)), log[-2000:]
            assert losses[STEPS] < losses[1] / 4, (name, losses)
    finally:
        c.stop()


def test_quickstart_exits_2_when_the_job_fails(tmp_path):
    """W/F = 1 and no checkpoints: the replacement of a killed daemon finds
    its shard lost for good. Both ranks' scripts stop with status 2 (the
    status the JobSet's podFailurePolicy ends the job on, as train_gpt.py)
    and the reason, instead of a JobFailed traceback (status 1)."""
    _require_binaries()
    c = Cluster(str(tmp_path))
    try:
        port, daemons, trainers = _start_job(c, tmp_path)
        poll(lambda: re.search(r"^step 1 loss", c.log("trainer0"), re.M),
             RUN_SECONDS, "step 1 on rank 0", daemons + trainers)
        # Held while rank 1's daemon is replaced, so that no rank finishes
        # the 60 steps first.
        for _, proc in trainers:
            proc.send_signal(signal.SIGSTOP)
        daemon1 = dict(daemons)["shardd1"]
        daemon1.send_signal(signal.SIGKILL)
        daemon1.wait(timeout=30)
        _start_daemon(c, tmp_path, port, 1, "shardd1-replacement")
        for _, proc in trainers:
            proc.send_signal(signal.SIGCONT)
        poll(lambda: all(p.poll() is not None for _, p in trainers),
             RUN_SECONDS, "end of the trainers")
        for name, proc in trainers:
            log = c.log(name)
            assert proc.returncode == 2, (
                f"{name} exited with {proc.returncode}:\n{log[-3000:]}")
            assert re.search(r"^job failed: .*shard 1 at step \d+ is lost",
                             log, re.M), log[-3000:]
            assert "Traceback" not in log, log[-3000:]
    finally:
        c.stop()
