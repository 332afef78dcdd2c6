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

FSDP is not a row: torch 1.13's FSDP cannot run on CPU (gloo lacks
reduce_scatter and _allgather_base, which FSDP's sharded strategies need).

Step time: forward + backward + optimizer step, measured inside every
trainer; a step's time is the slowest rank's; the row's figure is the median
over the measured steps after the warm-up steps of all its runs: the rows run
in rounds (3, --quick 2), each round every row once, so that a slow spell of
this shared machine does not fall on one row only. Client overhead (shardd
rows): the time a trainer spends inside shardd.torch's hooks and step (the
forward gather hooks, the per-unit gradient hand-over, the Step call),
RPC waits included, as a share of that trainer's step (median over steps,
mean over ranks); rpc_share is the part of it spent inside the client's RPC
calls (gather, release, reduce_grad, step), which wait for the daemon's
collectives and optimizer; python_share the rest (the hooks' own code and the
copies between the module's tensors and the shared-memory views).

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
START_SECONDS = 60  # Deadline for the processes to come up.
FSDP_NOTE = ("FSDP: not run; torch 1.13's FSDP cannot run on CPU (gloo "
             "lacks reduce_scatter and _allgather_base)")


# -- what every trainer shares -------------------------------------------
def make_model():
    import torch  # pylint: disable=import-outside-toplevel
    from torch import nn  # pylint: disable=import-outside-toplevel
    torch.manual_seed(SEED)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, OUT))


UNITS = ["0", "2", "4", "6"]


def local_batch(step, rank):
    import torch  # pylint: disable=import-outside-toplevel
    generator = torch.Generator().manual_seed(SEED * 1000 + step)
    x = torch.randn(GLOBAL_BATCH, IN, generator=generator)
    y = torch.randn(GLOBAL_BATCH, OUT, generator=generator)
    rows = GLOBAL_BATCH // W
    return x[rank * rows:(rank + 1) * rows], y[rank * rows:(rank + 1) * rows]


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

    timers = {"hooks": 0.0, "rpc": 0.0}

    def timed(fn, key):
        def wrapper(*a, **k):
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timers[key] += time.perf_counter() - t0
        return wrapper

    steps = []
    with TrainerClient(args.socket, default_timeout=120,
                       register_timeout=120) as client:
        client.wait_connected(timeout=START_SECONDS)
        model = st.wrap(make_model(), client, units=UNITS,
                        optimizer=st.AdamW(lr=LR, betas=BETAS,
                                           weight_decay=WEIGHT_DECAY),
                        max_grad_norm=MAX_GRAD_NORM,
                        no_weight_decay=no_weight_decay,
                        strategy=args.strategy,
                        sharding_factor=args.sharding_factor)
        # Instance attributes: the hooks look these up at call time. The
        # hooks' own bookkeeping (_grad_ready) is a few dict operations.
        for name in ("_gather_forward", "_reduce_unit", "_commit"):
            setattr(model, name, timed(getattr(model, name), "hooks"))
        for name in ("gather", "release", "reduce_grad", "step"):
            setattr(client, name, timed(getattr(client, name), "rpc"))
        total = args.warmup + args.steps
        while model.next_step <= total:
            step = model.next_step
            x, y = local_batch(step, args.rank)
            timers["hooks"] = timers["rpc"] = 0.0
            t0 = time.perf_counter()
            loss = nn.functional.mse_loss(model(x), y)
            model.backward(loss)
            model.step()
            seconds = time.perf_counter() - t0
            steps.append({"step": step, "seconds": seconds,
                          "hooks": timers["hooks"], "rpc": timers["rpc"],
                          "loss": loss.item()})
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(steps, f)


def ddp_trainer(args):
    import torch  # pylint: disable=import-outside-toplevel
    import torch.distributed as dist  # pylint: disable=import-outside-toplevel
    from torch import nn  # pylint: disable=import-outside-toplevel
    from torch.nn.parallel import DistributedDataParallel as DDP  # pylint: disable=import-outside-toplevel
    import datetime  # pylint: disable=import-outside-toplevel
    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
        world_size=W, timeout=datetime.timedelta(seconds=120))
    model = DDP(make_model())  # Default buckets (bucket_cap_mb=25).
    named = list(model.module.named_parameters())
    optimizer = torch.optim.AdamW(
        [{"params": [p for n, p in named if not no_weight_decay(n, p)]},
         {"params": [p for n, p in named if no_weight_decay(n, p)],
          "weight_decay": 0.0}],
        lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
    steps = []
    for step in range(1, args.warmup + args.steps + 1):
        x, y = local_batch(step, args.rank)
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
        optimizer.step()
        seconds = time.perf_counter() - t0
        steps.append({"step": step, "seconds": seconds, "loss": loss.item()})
    dist.barrier()
    dist.destroy_process_group()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(steps, f)


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

    def start(self, name, argv):
        with open(os.path.join(self.dir, f"{name}.log"), "wb") as log:
            proc = subprocess.Popen(  # pylint: disable=consider-using-with
                argv, stdout=log, stderr=subprocess.STDOUT,
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
                f"--steps={args.steps}",
                f"--out={os.path.join(directory, f'r{rank}.json')}"])
        procs.wait_all(names, args.row_seconds, f"{strategy} trainers")
    finally:
        procs.stop()
    return load_ranks(directory)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ddp(directory, args):
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
                f"--out={os.path.join(directory, f'r{rank}.json')}"])
        procs.wait_all(names, args.row_seconds, "DDP trainers")
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
    round): the median of each step's slowest rank's time (ms), and the
    client shares (median over steps per rank, mean over ranks)."""
    per_step, by_rank = [], [[] for _ in range(W)]
    for ranks in runs:
        measured = [[s for s in r if s["step"] > warmup] for r in ranks]
        per_step += [max(r[i]["seconds"] for r in measured)
                     for i in range(len(measured[0]))]
        for rank, r in enumerate(measured):
            by_rank[rank] += r
    out = {"step_ms": 1e3 * statistics.median(per_step),
           "loss": statistics.mean(r[-1]["loss"] for r in runs[-1])}
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
    columns = []
    for row in rows:
        for column in row:
            if column not in columns:
                columns.append(column)
    cells = [[fmt(row[c]) if c in row else "-" for c in columns]
             for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells])
              for i, c in enumerate(columns)]
    lines = [f"== {name} =="]
    for line in [columns] + cells:
        lines.append("  ".join(t.rjust(w) for t, w in zip(line, widths)))
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


def main_driver(args):
    for path in (COORDINATOR, SHARDD):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"torch_step: no {path} (bazel build "
                             "//daemon/coordinator:coordinator "
                             "//daemon/node:shardd)")
    sys.path.insert(0, CLIENT)
    # Parameter count, without touching torch's threads in this process.
    params = sum(p.numel() for p in make_model().parameters())
    print(f"torch_step: W = {W}, MLP {IN}-{HIDDEN}-{HIDDEN}-{HIDDEN}-{OUT} "
          f"({params / 1e6:.2f} M fp32 parameters, {len(UNITS)} units), "
          f"global batch {GLOBAL_BATCH}, AdamW + clip, {args.rounds} rounds "
          f"of every row, each {args.warmup} warm-up + {args.steps} measured "
          "steps, 1 torch thread per trainer, "
          f"{os.cpu_count()} cores", flush=True)
    print(FSDP_NOTE, flush=True)
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="torch_step.") as tmp:
        plan = [("ddp", "torch DDP (gloo)", None, 0),
                ("no_shard", "shardd NO_SHARD", "NO_SHARD", 1),
                ("full_shard", "shardd FULL_SHARD", "FULL_SHARD", W),
                ("hybrid_shard", "shardd HYBRID_SHARD F=2", "HYBRID_SHARD",
                 2)]
        # Rounds of all the rows, so that a slow spell of this shared
        # machine falls on every row rather than on one.
        runs = {key: [] for key, _, _, _ in plan}
        for round_ in range(args.rounds):
            for key, label, strategy, factor in plan:
                t0 = time.monotonic()
                directory = os.path.join(tmp, f"{key}.{round_}")
                ranks = (run_ddp(directory, args) if strategy is None else
                         run_shardd(directory, strategy, factor, args))
                runs[key].append(ranks)
                step_ms = summarize([ranks], args.warmup)["step_ms"]
                print(f"  round {round_ + 1}/{args.rounds} {label}: "
                      f"{step_ms:.1f} ms/step "
                      f"({time.monotonic() - t0:.0f} s)", flush=True)
        for key, label, strategy, factor in plan:
            results[key] = summarize(runs[key], args.warmup)
            row = {"row": label, "F": factor or W,
                   "step_ms": results[key]["step_ms"]}
            row["ratio_to_ddp"] = (results[key]["step_ms"] /
                                   results["ddp"]["step_ms"])
            if "client_share" in results[key]:
                row["client_ms"] = results[key]["client_ms"]
                row["client_share"] = results[key]["client_share"]
                row["rpc_share"] = results[key]["rpc_share"]
                row["python_share"] = results[key]["python_share"]
            row["final_loss"] = results[key]["loss"]
            rows.append(row)
    figures = {f"torch_{k}_step_ms": v["step_ms"] for k, v in results.items()}
    figures["torch_no_shard_step_ratio_to_ddp"] = (
        results["no_shard"]["step_ms"] / results["ddp"]["step_ms"])
    figures["torch_full_shard_step_ratio_to_ddp"] = (
        results["full_shard"]["step_ms"] / results["ddp"]["step_ms"])
    figures["torch_hybrid_shard_step_ratio_to_ddp"] = (
        results["hybrid_shard"]["step_ms"] / results["ddp"]["step_ms"])
    for k in ("no_shard", "full_shard", "hybrid_shard"):
        figures[f"torch_{k}_client_overhead_share"] = results[k][
            "client_share"]
        figures[f"torch_{k}_client_rpc_share"] = results[k]["rpc_share"]
        figures[f"torch_{k}_client_python_share"] = results[k][
            "python_share"]
    figures["parameters"] = params
    figures["world_size"] = W
    text, js = report("torch_step", rows, figures)
    print(text, end="")
    print(FSDP_NOTE)
    print("client_share: time in shardd.torch's hooks and step (RPC waits "
          "included) / step time; rpc_share: the part inside the client's "
          "RPC calls (they wait for the daemon's collectives); python_share: "
          "the rest (hook code, copies to and from the shared-memory views). "
          "ratio_to_ddp < 1: faster than DDP.")
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
    args = parser.parse_args()
    if args.role == "shardd":
        shardd_trainer(args)
        return
    if args.role == "ddp":
        ddp_trainer(args)
        return
    args.warmup = args.warmup or (3 if args.quick else 5)
    args.steps = args.steps or (6 if args.quick else 20)
    args.rounds = 2 if args.quick else 3
    args.row_seconds = 60 if args.quick else 150

    def terminate(signum, _frame):
        raise SystemExit(128 + signum)  # Through the finally blocks.
    signal.signal(signal.SIGTERM, terminate)
    signal.signal(signal.SIGINT, terminate)
    main_driver(args)


if __name__ == "__main__":
    main()
