"""The README's PyTorch example (examples/quickstart.py), so that it cannot rot.

The README shows the file itself: the first test checks that README.md
holds it verbatim in a ```python block. The second runs it as the README
says, one process per rank against a coordinator and W = 2 shardd daemons
(FULL_SHARD, F = 2), and checks that every rank commits all of its steps
and that the loss falls: the example learns a linear function, so the
loss at the last step is well below a quarter of the first step's (here it
falls from ~4 to ~0.1; the bound leaves room for the per-rank halves of
the batch). Every wait has a deadline and every process is killed when
the test ends (test_daemon.Cluster).
"""

import os
import re
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


def test_quickstart_trains_on_two_ranks_and_the_loss_falls(tmp_path):
    if not (os.access(COORDINATOR, os.X_OK) and os.access(SHARDD, os.X_OK)):
        message = (f"no daemon binaries ({COORDINATOR}; bazel build "
                   "//daemon/coordinator:coordinator //daemon/node:shardd)")
        if os.environ.get("SHARDD_REQUIRE_DAEMON") == "1":
            pytest.fail(message)
        pytest.skip(message)
    c = Cluster(str(tmp_path))
    try:
        coord = c.start("coordinator", [
            COORDINATOR, "--listen=127.0.0.1:0", f"--world_size={WORLD_SIZE}",
            f"--sharding_factor={WORLD_SIZE}"
        ])
        match = poll(
            lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                              c.log("coordinator")), START_SECONDS,
            "coordinator port", [("coordinator", coord)])
        sockets = []
        for rank in range(WORLD_SIZE):
            socket = str(tmp_path / f"s{rank}.sock")
            shm = tmp_path / f"shm{rank}"
            shm.mkdir()
            c.start(f"shardd{rank}", [
                SHARDD, f"--coordinator=127.0.0.1:{match.group(1)}",
                f"--identity=node-{rank}", f"--rank={rank}",
                f"--listen_unix={socket}", f"--shm_dir={shm}"
            ])
            sockets.append(socket)
        poll(lambda: all(os.path.exists(s) for s in sockets), START_SECONDS,
             "shardd sockets", c.procs)
        daemons = list(c.procs)
        env = dict(os.environ,
                   PYTHONPATH=os.path.join(REPO, "client", "python"))
        trainers = [(f"trainer{rank}", c.start(
            f"trainer{rank}",
            [sys.executable, EXAMPLE, sockets[rank], str(rank),
             str(WORLD_SIZE)], env=env)) for rank in range(WORLD_SIZE)]
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
