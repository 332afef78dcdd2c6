"""bench/torch_step: a torch training step through shardd.torch beside DDP.

    scripts/bench torch_step [--quick]
    (= /usr/bin/python3 bench/torch_step.py [--quick] --out=FILE)

At W = 4 on this machine, every row trains the same seeded MLP (MODEL below,
a few million fp32 parameters, one unit per Linear) on the same data (rank R
takes rows [R*B/W, (R+1)*B/W) of a global batch that is a function of the
step) with AdamW and clipping at MAX_GRAD_NORM, one torch thread per trainer:

  - shardd NO_SHARD, FULL_SHARD, HYBRID_SHARD (F = 2): a coordinator, 4
    shardd daemons and 4 torch trainers (wrap / model.backward / model.step;
    the optimizer runs in the daemons);
  - torch DDP: 4 processes, torch.distributed with gloo on 127.0.0.1 and
    DDP's default buckets (25 MiB), torch.optim.AdamW and clip_grad_norm_ in
    each process.

  - compute-only: W torch processes with the same model, batch, clipping
    and AdamW as DDP's, no communication, all W at once (a barrier of an
    idle gloo process group starts them together): the floor of a step on
    this machine. Its own processes, as every row (a torch process trained
    its first model slower than a later one here, so sharing DDP's
    processes would favour whichever ran second).

FSDP is not a row: torch 1.13's FSDP cannot run on CPU (gloo lacks
reduce_scatter and _allgather_base, which FSDP's sharded strategies need).

Step time: forward + backward + optimizer step, measured inside every
trainer; a step's time is the slowest rank's; the row's figure is the median
over the measured steps after the warm-up steps of all its runs: the rows run
in rounds (3, --quick 1), each round every row once, so that a slow spell of
this shared machine does not fall on one row only. Client overhead (shardd
rows): the time a trainer spends inside shardd.torch's hooks and step (the
forward gather hooks, the per-unit gradient hand-over, the Step call),
RPC waits included, as a share of that trainer's step (median over steps,
mean over ranks); rpc_share is the part of it spent inside the client's RPC
calls (gather, release, reduce_grad, step), which wait for the daemon's
collectives and optimizer; python_share the rest (the hooks' own code and the
copies between the module's tensors and the shared-memory views).

Profile (issue #21): where a step's wall time goes, per rank the mean over
the measured steps, then the mean over ranks (breakdown() below): shardd
rows time the client's calls inside the trainers (compute_ms: outside the
client; gather_ms, reduce_grad_ms, step_call_ms: blocked in those calls;
other_ms: the rest of the client, release_ms and the hooks' own code and
copies); plain torch rows time forward, backward (DDP: with its all-reduce
waits) and the optimizer. exposed_comm_ms_<row> = step_ms - the
compute-only row's, and exposed_comm_ratio_<row>_to_ddp the shardd rows'
over DDP's. The compute-only row's step_ms is its slowest rank's median
(its ranks do not run in step). Trainers run with OMP_NUM_THREADS=1 and
OPENBLAS_NUM_THREADS=1 and glibc's malloc keeping its memory (MALLOC_ENV:
without it the first model a torch process trains pays page faults every
step, up to 5x its optimizer step here, and rows would differ by that).

--rows=ddp --model=step --machine_lines: only DDP and compute-only on
bench/step's model, one "torch_row name=KEY column=value ..." line per
row: bench/step runs this. --quick: one round (two before the profile).

Every process has a deadline and is killed on the way out (finally; SIGTERM
and SIGINT exit through it too).
"""

import argparse
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CLIENT = os.path.join(REPO, "client", "python")
BIN_DIR = os.environ.get("SHARDD_BIN_DIR", os.path.join(REPO, "bazel-bin"))
COORDINATOR = os.path.join(BIN_DIR, "daemon/coordinator/coordinator")
SHARDD = os.path.join(BIN_DIR, "daemon/node/shardd")

W = 4
SEED = 2024
# Linear(IN, H) ReLU Linear(H, H) ReLU Linear(H, H) ReLU Linear(H, OUT).
IN, HIDDEN, OUT = 512, 1024, 512
GLOBAL_BATCH = 64
LR, BETAS, WEIGHT_DECAY, MAX_GRAD_NORM = 1e-3, (0.9, 0.999), 0.01, 1.0
# --model: this bench's MLP (above), or bench/step's model (4 x Linear
# 2048 x 2048, ReLU between, batch 64 per rank, AdamW lr 1e-2 without weight
# decay, clipping at 1.0), for the torch rows bench/step runs through
# --rows=ddp --model=step.
MODELS = {
    "torch_step": {"widths": (IN, HIDDEN, HIDDEN, HIDDEN, OUT),
                   "global_batch": GLOBAL_BATCH, "lr": LR,
                   "weight_decay": WEIGHT_DECAY},
    "step": {"widths": (2048,) * 5, "global_batch": 64 * W, "lr": 1e-2,
             "weight_decay": 0.0},
}
START_SECONDS = 60  # Deadline for the processes to come up.
FSDP_NOTE = ("FSDP: not run; torch 1.13's FSDP cannot run on CPU (gloo "
             "lacks reduce_scatter and _allgather_base)")


# -- what every trainer shares -------------------------------------------
def make_model(model="torch_step"):
    """Linear ReLU Linear ... Linear over MODELS[model]'s widths."""
    import torch  # pylint: disable=import-outside-toplevel
    from torch import nn  # pylint: disable=import-outside-toplevel
    torch.manual_seed(SEED)
    widths = MODELS[model]["widths"]
    layers = []
    for i in range(len(widths) - 1):
        if layers:
            layers.append(nn.ReLU())
        layers.append(nn.Linear(widths[i], widths[i + 1]))
    return nn.Sequential(*layers)


UNITS = ["0", "2", "4", "6"]  # The Linears of either model.


def local_batch(step, rank, model="torch_step"):
    import torch  # pylint: disable=import-outside-toplevel
    widths = MODELS[model]["widths"]
    batch = MODELS[model]["global_batch"]
    generator = torch.Generator().manual_seed(SEED * 1000 + step)
    x = torch.randn(batch, widths[0], generator=generator)
    y = torch.randn(batch, widths[-1], generator=generator)
    rows = batch // W
    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]


def make_adamw(module, model="torch_step"):
    """torch.optim.AdamW as the daemons run it: no decay on biases."""
    import torch  # pylint: disable=import-outside-toplevel
    named = list(module.named_parameters())
    return torch.optim.AdamW(
        [{"params": [p for n, p in named if not no_weight_decay(n, p)]},
         {"params": [p for n, p in named if no_weight_decay(n, p)],
          "weight_decay": 0.0}],
        lr=MODELS[model]["lr"], betas=BETAS,
        weight_decay=MODELS[model]["weight_decay"])


def no_weight_decay(fqn, _param):
    return fqn.endswith("bias")


# -- trainers ---------------------------------------------------------------
def shardd_trainer(args):
    import torch  # pylint: disable=import-outside-toplevel
    from torch import nn  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(1)
    sys.path.insert(0, CLIENT)
    # pylint: disable=import-outside-toplevel
    import shardd.torch as st
    from shardd.client import TrainerClient

    # Seconds per step: "hooks" (inside shardd.torch's hooks and step),
    # "rpc" (inside the client's four calls), per call "t_gather",
    # "t_release", "t_reduce_grad", "t_step", and "t_client": inside either
    # (the outermost wrapped call only, so nothing counts twice). The
    # trainer's compute is the step's time outside t_client.
    keys = ("hooks", "rpc", "t_gather", "t_release", "t_reduce_grad",
            "t_step", "t_client")
    timers = dict.fromkeys(keys, 0.0)
    depth = [0]

    def timed(fn, *names):
        def wrapper(*a, **k):
            depth[0] += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                seconds = time.perf_counter() - t0
                depth[0] -= 1
                for name in names:
                    timers[name] += seconds
                if depth[0] == 0:
                    timers["t_client"] += seconds
        return wrapper

    steps = []
    with TrainerClient(args.socket, default_timeout=120,
                       register_timeout=120) as client:
        client.wait_connected(timeout=START_SECONDS)
        model = st.wrap(make_model(args.model), client, units=UNITS,
                        optimizer=st.AdamW(
                            lr=MODELS[args.model]["lr"], betas=BETAS,
                            weight_decay=MODELS[args.model]["weight_decay"]),
                        max_grad_norm=MAX_GRAD_NORM,
                        no_weight_decay=no_weight_decay,
                        strategy=args.strategy,
                        sharding_factor=args.sharding_factor)
        # Instance attributes: the hooks look these up at call time. The
        # hooks' own bookkeeping (_grad_ready) is a few dict operations.
        for name in ("_gather_forward", "_reduce_unit", "_commit"):
            setattr(model, name, timed(getattr(model, name), "hooks"))
        for name in ("gather", "release", "reduce_grad", "step"):
            setattr(client, name,
                    timed(getattr(client, name), "rpc", f"t_{name}"))
        total = args.warmup + args.steps
        while model.next_step <= total:
            step = model.next_step
            x, y = local_batch(step, args.rank, args.model)
            for key in keys:
                timers[key] = 0.0
            t0 = time.perf_counter()
            loss = nn.functional.mse_loss(model(x), y)
            model.backward(loss)
            model.step()
            seconds = time.perf_counter() - t0
            steps.append({"step": step, "seconds": seconds, **timers,
                          "loss": loss.item()})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(steps, f)


def timed_torch_step(module, optimizer, x, y):
    """One step of plain torch (DDP or not): the step's record, with its
    forward, backward (DDP: with the wait for its all-reduces) and
    optimizer (clipping, AdamW) seconds."""
    import torch  # pylint: disable=import-outside-toplevel
    from torch import nn  # pylint: disable=import-outside-toplevel
    t0 = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(module(x), y)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    torch.nn.utils.clip_grad_norm_(module.parameters(), MAX_GRAD_NORM)
    optimizer.step()
    t3 = time.perf_counter()
    return {"seconds": t3 - t0, "fwd": t1 - t0, "bwd": t2 - t1,
            "opt": t3 - t2, "loss": loss.item()}


def ddp_trainer(args):
    """DDP; with --compute_only the compute-only row instead: the same
    model, batch and optimizer without DDP (no communication inside the
    steps), all W processes at once (started together by a barrier of the
    process group, which is idle during those steps). Separate processes
    for the two rows: both are measured from a fresh process, as the
    shardd trainers are (the first model a torch process trains ran
    slower here than a later one in the same process)."""
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    from torch.nn.parallel import DistributedDataParallel as DDP  # pylint: disable=import-outside-toplevel
    import datetime  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
        world_size=W, timeout=datetime.timedelta(seconds=120))
    total = args.warmup + args.steps
    if args.compute_only:
        module = make_model(args.model)
        optimizer = make_adamw(module, args.model)
        local = []
        dist.barrier()
        for step in range(1, total + 1):
            x, y = local_batch(step, args.rank, args.model)
            local.append({"step": step, "local": True,
                          **timed_torch_step(module, optimizer, x, y)})
        dist.barrier()
        dist.destroy_process_group()
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(local, f)
        return
    model = DDP(make_model(args.model))  # Default buckets (25 MiB).
    optimizer = make_adamw(model.module, args.model)
    steps = []
    for step in range(1, total + 1):
        x, y = local_batch(step, args.rank, args.model)
        steps.append({"step": step,
                      **timed_torch_step(model, optimizer, x, y)})
    dist.barrier()
    dist.destroy_process_group()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(steps, f)


COMPUTE_LABEL = "compute-only (W procs, no comm)"


# -- the driver -------------------------------------------------------------
def _die_with_parent():
    """In the child: SIGKILL when the driver dies, even by SIGKILL."""
    import ctypes  # pylint: disable=import-outside-toplevel
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # SET_PDEATHSIG


class Procs:
    """Child processes and their logs; stop() kills whatever still runs
    (and each child dies with the driver: PR_SET_PDEATHSIG)."""

    def __init__(self, directory):
        self.dir, self.procs = directory, []

    def start(self, name, argv, env=None):
        with open(os.path.join(self.dir, f"{name}.log"), "wb") as log:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                preexec_fn=_die_with_parent)
        self.procs.append((name, proc))
        return proc

    def log(self, name):
        with open(os.path.join(self.dir, f"{name}.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def wait_all(self, names, seconds, what):
        deadline = time.monotonic() + seconds
        watched = [(n, p) for n, p in self.procs if n in names]
        while any(p.poll() is None for _, p in watched):
            for name, proc in self.procs:
                if name not in names and proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} "
                                       f"during {what}:\n"
                                       f"{self.log(name)[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not done within {seconds} s")
            time.sleep(0.05)
        for name, proc in watched:
            if proc.returncode != 0:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n"
                                   f"{self.log(name)[-3000:]}")

    def poll(self, condition, seconds, what):
        deadline = time.monotonic() + seconds
        while True:
            value = condition()
            if value:
                return value
            for name, proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited with {proc.returncode} "
                                       f"while waiting for {what}:\n"
                                       f"{self.log(name)[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} within {seconds} s")
            time.sleep(0.05)

    def stop(self):
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.kill()
        for _, proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []


def this_script():
    return [sys.executable, os.path.abspath(__file__)]


# glibc's malloc, left to itself, hands torch's multi-MB temporaries (the
# gradients, AdamW's intermediates) back to the kernel after every step in
# some processes and not in others: measured here, the first model a torch
# process trains spent 60-120 ms of CPU per step where a later one (or any,
# with these settings) spent 16-35 ms, the difference page faults on this
# VM. Every torch trainer of every row runs with these, so that the rows
# differ by their communication, not by their allocator's state. The
# threshold (the largest glibc takes, 32 MiB) is above the largest tensor
# of either model (bench/step's 16 MiB weights).
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(32 << 20),
              "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def trainer_env():
    """One thread per trainer: torch.set_num_threads(1) in the trainers,
    and OpenMP and OpenBLAS told the same before torch loads; and
    MALLOC_ENV."""
    return dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
                **MALLOC_ENV)


def run_shardd(directory, strategy, factor, args):
    os.makedirs(directory)
    procs = Procs(directory)
    try:
        procs.start("coordinator", [
            COORDINATOR, "--listen=127.0.0.1:0", f"--world_size={W}",
            f"--sharding_factor={factor}"])
        port = procs.poll(
            lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                              procs.log("coordinator")),
            START_SECONDS, "coordinator port").group(1)
        sockets = []
        for rank in range(W):
            sock = os.path.join(directory, f"s{rank}.sock")
            shm = os.path.join(directory, f"shm{rank}")
            os.makedirs(shm)
            procs.start(f"shardd{rank}", [
                SHARDD, f"--coordinator=127.0.0.1:{port}",
                f"--identity=node-{rank}", f"--rank={rank}",
                f"--listen_unix={sock}", f"--shm_dir={shm}"])
            sockets.append(sock)
        procs.poll(lambda: all(os.path.exists(s) for s in sockets),
                   START_SECONDS, "shardd sockets")
        names = []
        for rank in range(W):
            names.append(f"trainer{rank}")
            procs.start(names[-1], this_script() + [
                "--role=shardd", f"--socket={sockets[rank]}",
                f"--rank={rank}", f"--strategy={strategy}",
                f"--sharding_factor={factor}", f"--warmup={args.warmup}",
                f"--steps={args.steps}", f"--model={args.model}",
                f"--out={os.path.join(directory, f'r{rank}.json')}"],
                env=trainer_env())
        procs.wait_all(names, args.row_seconds, f"{strategy} trainers")
    finally:
        procs.stop()
    return load_ranks(directory)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(directory, args, compute_only=False):
    """The DDP row, or with compute_only the compute-only row: its ranks."""
    os.makedirs(directory)
    procs = Procs(directory)
    try:
        port = free_port()
        names = []
        for rank in range(W):
            names.append(f"ddp{rank}")
            procs.start(names[-1], this_script() + [
                "--role=ddp", f"--port={port}", f"--rank={rank}",
                f"--warmup={args.warmup}", f"--steps={args.steps}",
                f"--model={args.model}",
                f"--out={os.path.join(directory, f'r{rank}.json')}"] +
                (["--compute_only"] if compute_only else []),
                env=trainer_env())
        procs.wait_all(names, args.row_seconds,
                       "compute-only trainers" if compute_only else
                       "DDP trainers")
    finally:
        procs.stop()
    return load_ranks(directory)


def load_ranks(directory):
    ranks = []
    for rank in range(W):
        with open(os.path.join(directory, f"r{rank}.json"),
                  encoding="utf-8") as f:
            ranks.append(json.load(f))
    return ranks


def summarize(runs, warmup):
    """Over the measured steps of every round (`runs`: one list of ranks per
    round): the median of each step's slowest rank's time (ms; compute-only
    rows: the largest over ranks of a rank's median), and the client shares
    (median over steps per rank, mean over ranks)."""
    per_step, by_rank = [], [[] for _ in range(W)]
    for ranks in runs:
        measured = [[s for s in r if s["step"] > warmup] for r in ranks]
        per_step += [max(r[i]["seconds"] for r in measured)
                     for i in range(len(measured[0]))]
        for rank, r in enumerate(measured):
            by_rank[rank] += r
    out = {"step_ms": 1e3 * statistics.median(per_step),
           "loss": statistics.mean(r[-1]["loss"] for r in runs[-1])}
    if by_rank[0][0].get("local"):
        # Compute-only: the ranks are not in step with each other, so the
        # slowest rank per step picks each step's worst noise; the slowest
        # rank's median step is what W processes sustain.
        out["step_ms"] = 1e3 * max(statistics.median(s["seconds"] for s in r)
                                   for r in by_rank)
    if "hooks" in by_rank[0][0]:
        def share(f):
            return statistics.mean(statistics.median(f(s) for s in r)
                                   for r in by_rank)
        out["client_share"] = share(lambda s: s["hooks"] / s["seconds"])
        out["rpc_share"] = share(lambda s: s["rpc"] / s["seconds"])
        out["python_share"] = share(
            lambda s: (s["hooks"] - s["rpc"]) / s["seconds"])
        out["client_ms"] = 1e3 * share(lambda s: s["hooks"])
    return out


def breakdown(runs, warmup):
    """Where a step's time goes, in ms: per rank the mean over the measured
    steps of every round, then the mean over ranks (means, so that the
    parts add up to rank_step_ms, the mean step of a rank; step_ms is the
    median of the slowest rank's). shardd rows: compute_ms (outside the
    client: forward, backward, loss, the trainer's own work), gather_ms,
    reduce_grad_ms, step_call_ms (blocked in those calls), other_ms (the
    rest of the client: release_ms and the hooks' own code and copies).
    Plain torch rows: fwd_ms, bwd_ms (DDP: with its all-reduce waits),
    opt_ms (clipping + AdamW); the compute-only row's compute_ms is its
    whole step."""
    by_rank = [[] for _ in range(W)]
    for ranks in runs:
        for rank, r in enumerate(ranks):
            by_rank[rank] += [s for s in r if s["step"] > warmup]

    def parts(s):
        out = {"rank_step_ms": s["seconds"]}
        if "t_client" in s:
            out["compute_ms"] = s["seconds"] - s["t_client"]
            out["gather_ms"] = s["t_gather"]
            out["reduce_grad_ms"] = s["t_reduce_grad"]
            out["step_call_ms"] = s["t_step"]
            out["other_ms"] = (s["t_client"] - s["t_gather"] -
                               s["t_reduce_grad"] - s["t_step"])
            out["release_ms"] = s["t_release"]
        if s.get("local"):
            out["compute_ms"] = s["seconds"]
        for key in ("fwd", "bwd", "opt"):
            if key in s:
                out[f"{key}_ms"] = s[key]
        return out

    per_rank = []
    for steps in by_rank:
        table = [parts(s) for s in steps]
        per_rank.append({k: statistics.mean(t[k] for t in table)
                         for k in table[0]})
    return {k: 1e3 * statistics.mean(r[k] for r in per_rank)
            for k in per_rank[0]}


def exposed_figures(step_ms):
    """exposed_comm_ms_<row> = step - compute-only (step_ms: row -> ms,
    with "compute"), and each shardd row's ratio to DDP's (None where DDP
    exposes nothing: the ratio has no meaning then)."""
    figures = {}
    for key, ms in step_ms.items():
        if key != "compute":
            figures[f"exposed_comm_ms_{key}"] = ms - step_ms["compute"]
    ddp = figures.get("exposed_comm_ms_ddp")
    for key in ("no_shard", "full_shard", "hybrid_shard"):
        if f"exposed_comm_ms_{key}" in figures and ddp is not None:
            figures[f"exposed_comm_ratio_{key}_to_ddp"] = (
                figures[f"exposed_comm_ms_{key}"] / ddp if ddp > 0
                else float("nan"))
    return figures


BREAKDOWN_COLUMNS = ["row", "step_ms", "exposed_comm_ms", "rank_step_ms",
                     "compute_ms", "gather_ms", "reduce_grad_ms",
                     "step_call_ms", "other_ms", "release_ms", "fwd_ms",
                     "bwd_ms", "opt_ms"]


def table(rows, columns=None):
    """Aligned text of `rows` (dicts) over `columns` (default: every column
    in order of appearance); a missing cell is "-"."""
    if columns is None:
        columns = []
        for row in rows:
            for column in row:
                if column not in columns:
                    columns.append(column)
    columns = [c for c in columns if any(c in row for row in rows)]
    cells = [[fmt(row[c]) if c in row else "-" for c in columns]
             for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells])
              for i, c in enumerate(columns)]
    return ["  ".join(t.rjust(w) for t, w in zip(line, widths))
            for line in [columns] + cells]


def fmt(value):
    if isinstance(value, str):
        return value
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return f"{value:.0f}"
    return f"{value:.4g}"


def json_number(value):
    if not math.isfinite(value):
        return "null"
    if value == int(value) and abs(value) < 9007199254740992.0:
        return f"{value:.0f}"
    return f"{value:.10g}"


def report(name, rows, figures):
    """The table and the JSON of bench/bench_report.h, in Python."""
    lines = [f"== {name} =="] + table(rows)
    lines.append("figures:")
    for key in sorted(figures):
        lines.append(f"  {key} = {fmt(figures[key])}")
    text = "\n".join(lines) + "\n"

    def cell(v):
        return json.dumps(v) if isinstance(v, str) else json_number(v)
    js = "{\n  \"name\": " + json.dumps(name) + ",\n  \"figures\": {"
    js += ",".join(f"\n    {json.dumps(k)}: {json_number(figures[k])}"
                   for k in sorted(figures))
    js += "\n  },\n  \"rows\": ["
    js += ",".join("\n    {" + ", ".join(f"{json.dumps(k)}: {cell(v)}"
                                        for k, v in row.items()) + "}"
                   for row in rows)
    js += "\n  ]\n}\n"
    return text, js


ROW_PLAN = [("compute", COMPUTE_LABEL, "compute", 0),
            ("ddp", "torch DDP (gloo)", None, 0),
            ("no_shard", "shardd NO_SHARD", "NO_SHARD", 1),
            ("full_shard", "shardd FULL_SHARD", "FULL_SHARD", W),
            ("hybrid_shard", "shardd HYBRID_SHARD F=2", "HYBRID_SHARD", 2)]


def run_rounds(args, tmp):
    """Rounds of all the rows, so that a slow spell of this shared machine
    falls on every row rather than on one: row key -> one list of ranks per
    round ("compute" comes with "ddp")."""
    plan = [p for p in ROW_PLAN if p[0] in args.rows or p[0] == "compute"]
    runs = {key: [] for key, _, _, _ in plan}
    for round_ in range(args.rounds):
        for key, label, strategy, factor in plan:
            t0 = time.monotonic()
            directory = os.path.join(tmp, f"{key}.{round_}")
            if strategy in (None, "compute"):
                ranks = run_ddp(directory, args, strategy == "compute")
            else:
                ranks = run_shardd(directory, strategy, factor, args)
            runs[key].append(ranks)
            step_ms = summarize([ranks], args.warmup)["step_ms"]
            print(f"  round {round_ + 1}/{args.rounds} {label}: "
                  f"{step_ms:.1f} ms/step "
                  f"({time.monotonic() - t0:.0f} s)", flush=True)
    return runs


def rows_and_figures(runs, warmup, params):
    """The report's rows (one per row key, compute-only first, each with
    its breakdown and exposed communication) and figures."""
    labels = {key: label for key, label, _, _ in ROW_PLAN}
    factors = {key: factor or W for key, _, _, factor in ROW_PLAN}
    factors["compute"] = 1
    order = [key for key, _, _, _ in ROW_PLAN if key in runs]
    results = {key: summarize(runs[key], warmup) for key in order}
    exposed = exposed_figures({k: v["step_ms"] for k, v in results.items()})
    rows = []
    for key in order:
        row = {"row": labels[key], "F": factors.get(key, 1),
               "step_ms": results[key]["step_ms"]}
        row["ratio_to_ddp"] = (results[key]["step_ms"] /
                               results["ddp"]["step_ms"])
        if "client_share" in results[key]:
            row["client_ms"] = results[key]["client_ms"]
            row["client_share"] = results[key]["client_share"]
            row["rpc_share"] = results[key]["rpc_share"]
            row["python_share"] = results[key]["python_share"]
        row["final_loss"] = results[key]["loss"]
        if f"exposed_comm_ms_{key}" in exposed:
            row["exposed_comm_ms"] = exposed[f"exposed_comm_ms_{key}"]
        row.update(breakdown(runs[key], warmup))
        rows.append(row)
    figures = {f"torch_{k}_step_ms": v["step_ms"] for k, v in results.items()
               if k != "compute"}
    figures["torch_compute_only_step_ms"] = results["compute"]["step_ms"]
    for k in ("no_shard", "full_shard", "hybrid_shard"):
        if k not in results:
            continue
        figures[f"torch_{k}_step_ratio_to_ddp"] = (
            results[k]["step_ms"] / results["ddp"]["step_ms"])
        figures[f"torch_{k}_client_overhead_share"] = results[k][
            "client_share"]
        figures[f"torch_{k}_client_rpc_share"] = results[k]["rpc_share"]
        figures[f"torch_{k}_client_python_share"] = results[k][
            "python_share"]
    figures.update(exposed)
    figures["parameters"] = params
    figures["world_size"] = W
    return rows, figures


def machine_lines(rows):
    """One 'torch_row name=KEY column=value ...' line per row, the numbers
    only (KEY: compute, ddp, no_shard, full_shard, hybrid_shard)."""
    keys = {label: key for key, label, _, _ in ROW_PLAN}
    return [f"torch_row name={keys[row['row']]} " +
            " ".join(f"{k}={v:.6g}" for k, v in row.items()
                     if not isinstance(v, str))
            for row in rows]


def main_driver(args):
    shardd_rows = any(key != "ddp" for key in args.rows)
    for path in (COORDINATOR, SHARDD) if shardd_rows else ():
        if not os.access(path, os.X_OK):
            raise SystemExit(f"torch_step: no {path} (bazel build "
                             "//daemon/coordinator:coordinator "
                             "//daemon/node:shardd)")
    sys.path.insert(0, CLIENT)
    # Parameter count, without importing torch here (seconds on this box).
    w = MODELS[args.model]["widths"]
    params = sum(w[i] * w[i + 1] + w[i + 1] for i in range(len(w) - 1))
    widths = "-".join(str(w) for w in MODELS[args.model]["widths"])
    print(f"torch_step: W = {W}, MLP {widths} "
          f"({params / 1e6:.2f} M fp32 parameters, {len(UNITS)} units), "
          f"global batch {MODELS[args.model]['global_batch']}, AdamW + clip, "
          f"{args.rounds} round(s) of every row, each {args.warmup} warm-up "
          f"+ {args.steps} measured steps, 1 torch thread per trainer, "
          f"{os.cpu_count()} cores", flush=True)
    print(FSDP_NOTE, flush=True)
    with tempfile.TemporaryDirectory(prefix="torch_step.") as tmp:
        runs = run_rounds(args, tmp)
    rows, figures = rows_and_figures(runs, args.warmup, params)
    text, js = report("torch_step", rows, figures)
    print(text, end="")
    print("breakdown (ms; per rank the mean over measured steps, then the "
          "mean over ranks; the parts add up to rank_step_ms):")
    print("\n".join(table(rows, BREAKDOWN_COLUMNS)))
    print(FSDP_NOTE)
    print("client_share: time in shardd.torch's hooks and step (RPC waits "
          "included) / step time; rpc_share: the part inside the client's "
          "RPC calls (they wait for the daemon's collectives); python_share: "
          "the rest (hook code, copies to and from the shared-memory views). "
          "ratio_to_ddp < 1: faster than DDP. exposed_comm_ms: step_ms - "
          "the compute-only row's (W processes, same model, batch and "
          "AdamW, no communication). Breakdown: compute_ms = outside the "
          "client (shardd rows) or the whole step (compute-only); "
          "gather/reduce_grad/step_call_ms: blocked in those calls; "
          "other_ms: the rest of the client (release_ms, hook code, "
          "copies); DDP's all-reduce waits are inside its bwd_ms.")
    if args.machine_lines:
        # For bench/step, which runs --rows=ddp --model=step and reads these.
        print("\n".join(machine_lines(rows)))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(js)
        print(f"wrote {args.out}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="")
    parser.add_argument("--role", default="driver",
                        choices=["driver", "shardd", "ddp"])
    parser.add_argument("--socket", default="")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--rank", type=int, default=0)
    parser.add_argument("--strategy", default="FULL_SHARD")
    parser.add_argument("--sharding_factor", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--model", default="torch_step",
                        choices=sorted(MODELS))
    parser.add_argument("--compute_only", action="store_true")
    parser.add_argument("--rows",
                        default=",".join(k for k, *_ in ROW_PLAN[1:]),
                        help="comma-separated subset of "
                        "ddp,no_shard,full_shard,hybrid_shard (ddp "
                        "required: it brings the compute-only row)")
    parser.add_argument("--rounds", type=int, default=0)
    parser.add_argument("--machine_lines", action="store_true",
                        help="also print one 'torch_row name=KEY k=v ...' "
                        "line per row (bench/step reads them)")
    args = parser.parse_args()
    if args.role == "shardd":
        shardd_trainer(args)
        return
    if args.role == "ddp":
        ddp_trainer(args)
        return
    args.warmup = args.warmup or (3 if args.quick else 5)
    args.steps = args.steps or (6 if args.quick else 20)
    # --quick: one round (under a minute with the compute-only row).
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.rows = args.rows.split(",")
    known = [k for k, *_ in ROW_PLAN[1:]]
    if "ddp" not in args.rows or any(k not in known for k in args.rows):
        parser.error(f"--rows: a subset of {','.join(known)} with ddp")
    args.row_seconds = 60 if args.quick else 150

    def terminate(signum, _frame):
        raise SystemExit(128 + signum)  # Through the finally blocks.
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    main_driver(args)


if __name__ == "__main__":
    main()
