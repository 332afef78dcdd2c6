"""shardd.torch against real processes: a coordinator, W shardd, W trainers.

Each test starts a coordinator and W daemons, then W torch trainer
processes (torch_trainer.py) that build the same seeded nn.Sequential
(Linear-ReLU-Linear), wrap it with shardd.torch (AdamW, clip norm, biases
without weight decay) and train it for STEPS steps, rank R on its 1/W of
each global batch. The committed parameters (gathered from the daemons by
every rank) are compared with a single-process torch reference that uses
torch.optim.AdamW and clip_grad_norm_ on the same global batches, and a
second run on a fresh cluster must end bit-identical to the first.

Why the tolerance (TOLERANCE = 1e-5 on parameters of magnitude ~0.5): the
reference computes each rank's gradient on that rank's rows with the same
ops and one thread, as the trainers do, so the per-rank gradients are the
same bits; it then averages them in a fixed order ((g0 + g1) / 2 for W = 2
is exact up to one rounding and commutative, so it equals the daemon's
sum-then-scale; for W = 4 the daemon's ReduceScatter-then-AllReduce groups
the four sums as it likes: a rounding of 2^-24 relative per addition). The
rest differs by rounding only: the daemon computes the global norm exactly
(fixed point) and rounds once, clip_grad_norm_ takes a norm of per-tensor
fp32 norms (a few ulps), so the clip scale differs by ~1e-7 relative; AdamW's
update m / (sqrt(v) + eps) is invariant to a common scale of the gradient
up to eps, so such a difference moves a parameter by far less than lr * 1e-5
per step. Over STEPS = 6 steps with lr = 1e-2 the expected difference is
~1e-8; 1e-5 leaves room while still catching any real error (a missing
clip, a wrong weight decay, a wrong average or a skipped step is >= 1e-4).
"""

import os
import re
import signal
import sys
import threading

import grpc
import pytest
import torch
from torch import nn

import shardd.torch as st
from shardd.client import TrainerClient
import torch_trainer as tt
from test_daemon import (COORDINATOR, SHARDD, START_SECONDS, Cluster, poll,
                         start_single_rank_job)

STEPS = 6
TOLERANCE = 1e-5
BF16_TOLERANCE = 1e-8  # test_bf16_parameters_with_fp32_masters_w2 says why.
RUN_SECONDS = 240  # Deadline for the trainers of one run.
TRAINER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                       "torch_trainer.py")


def need_binaries():
    if not (os.access(COORDINATOR, os.X_OK) and os.access(SHARDD, os.X_OK)):
        message = (f"no daemon binaries ({COORDINATOR}; bazel build "
                   "//daemon/coordinator:coordinator //daemon/node:shardd)")
        if os.environ.get("SHARDD_REQUIRE_DAEMON") == "1":
            pytest.fail(message)
        pytest.skip(message)


def train(directory, world_size, sharding_factor, strategy, units,
          export=False, kill_rank=None, failpoint=None, schedule=False,
          kill_trainer=False, optimizer="adamw", deep=False, param_dtype="",
          lr=tt.LR, steps=STEPS, init="", load_from="",
          export_optimizer=False, zero_copy=False, model="",
          micro_batches=1, stop_rank=None, daemon_flags=()):
    """Runs one cluster and its trainers: every rank's results (and export).

    kill_rank: that rank's daemon runs with --failpoint=`failpoint`. A kill
    point: once the daemon is dead a replacement takes its slot and socket.
    With kill_trainer, a stop point: once the daemon has stopped itself
    (SIGSTOP, in the middle of a step) its trainer is SIGKILLed, the daemon
    continued (SIGCONT) and a new trainer started against it.
    stop_rank: that rank's trainer stops itself after step 4's forward and
    is continued once the coordinator has a new epoch ready (its peers'
    collectives timed out: pass a short --collective_timeout_ms in
    daemon_flags, every daemon's extra flags).
    """
    os.makedirs(directory)
    c = Cluster(directory)
    try:
        coord = c.start("coordinator", [
            COORDINATOR, "--listen=127.0.0.1:0",
            f"--world_size={world_size}",
            f"--sharding_factor={sharding_factor}"
        ])
        match = poll(
            lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                              c.log("coordinator")), START_SECONDS,
            "coordinator port", [("coordinator", coord)])
        sockets, daemon_argv = [], []
        for rank in range(world_size):
            socket = os.path.join(directory, f"s{rank}.sock")
            shm = os.path.join(directory, f"shm{rank}")
            os.makedirs(shm)
            argv = [
                SHARDD, f"--coordinator=127.0.0.1:{match.group(1)}",
                f"--identity=node-{rank}", f"--rank={rank}",
                f"--listen_unix={socket}", f"--shm_dir={shm}",
                *daemon_flags
            ]
            daemon_argv.append(argv)
            if rank == kill_rank:
                argv = argv + [f"--failpoint={failpoint}"]
            c.start(f"shardd{rank}", argv)
            sockets.append(socket)
        poll(lambda: all(os.path.exists(s) for s in sockets), START_SECONDS,
             "shardd sockets", c.procs)
        export_path = os.path.join(directory, "full.safetensors")
        trainers = []
        for rank in range(world_size):
            argv = [
                sys.executable, TRAINER, f"--socket={sockets[rank]}",
                f"--rank={rank}", f"--world_size={world_size}",
                f"--steps={steps}", f"--strategy={strategy}",
                f"--sharding_factor={sharding_factor}",
                f"--units={','.join(units)}",
                f"--out={os.path.join(directory, f'out{rank}.pt')}"
            ]
            if export:
                argv.append(f"--export={export_path}")
            if schedule:
                argv.append("--schedule")
            if deep:
                argv.append("--deep")
            argv += [f"--optimizer={optimizer}", f"--lr={lr!r}"]
            if param_dtype:
                argv.append(f"--param_dtype={param_dtype}")
            if init:
                argv.append(f"--init={init}")
            if load_from:
                argv.append(f"--load_from={load_from}")
            if export_optimizer:
                argv.append("--export_optimizer")
            if zero_copy:
                argv.append("--zero_copy")
            if model:
                argv.append(f"--model={model}")
            argv.append(f"--micro_batches={micro_batches}")
            if rank == stop_rank:
                argv.append("--stop_in_step=4")
            trainers.append((f"trainer{rank}", c.start(f"trainer{rank}",
                                                       argv)))
        daemons = [p for p in c.procs if p not in trainers]
        if stop_rank is not None:
            trainer = trainers[stop_rank][1]
            poll(lambda: stopped(trainer.pid), RUN_SECONDS,
                 f"trainer {stop_rank} stopped in step 4", daemons + trainers)
            poll(lambda: re.search(r"EPOCH_READY: epoch ([3-9]|\d\d+) ready",
                                   c.log("coordinator")), RUN_SECONDS,
                 "a new epoch ready while the trainer is stopped",
                 daemons + trainers)
            trainer.send_signal(signal.SIGCONT)
        if kill_rank is not None and kill_trainer:
            daemon = dict(daemons)[f"shardd{kill_rank}"]
            poll(lambda: stopped(daemon.pid), RUN_SECONDS,
                 f"daemon {kill_rank} stopped at its fail point",
                 daemons + trainers)
            trainer = trainers[kill_rank][1]
            trainer.send_signal(signal.SIGKILL)
            trainer.wait(timeout=30)
            daemon.send_signal(signal.SIGCONT)
            argv = list(trainer.args)
            trainers[kill_rank] = (f"trainer{kill_rank}-2",
                                   c.start(f"trainer{kill_rank}-2", argv))
        elif kill_rank is not None:
            doomed = dict(daemons).pop(f"shardd{kill_rank}")
            daemons = [d for d in daemons if d[1] is not doomed]
            poll(lambda: doomed.poll() is not None, RUN_SECONDS,
                 f"death of daemon {kill_rank} by its fail point",
                 daemons + trainers)
            assert doomed.returncode == -9, doomed.returncode  # SIGKILL.
            daemons.append((f"shardd{kill_rank}-2",
                            c.start(f"shardd{kill_rank}-2",
                                    daemon_argv[kill_rank])))
        poll(lambda: all(p.poll() is not None for _, p in trainers),
             RUN_SECONDS, "end of the trainers", daemons)
        for name, proc in trainers:
            assert proc.returncode == 0, (
                f"{name} exited with {proc.returncode}:\n{c.log(name)[-3000:]}")
        results = [
            torch.load(os.path.join(directory, f"out{r}.pt"))
            for r in range(world_size)
        ]
        return results, (export_path if export else None)
    finally:
        c.stop()


def stopped(pid):
    """The process is stopped (SIGSTOP): state T in /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        # The state follows the command name, which is in parentheses.
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def reference(world_size, schedule=False, optimizer="adamw", deep=False,
              low=None, lr=tt.LR, model_kind="", micro_batches=1):
    """The parameters after STEPS steps of plain torch on one process.

    low (a 16-bit dtype): mixed precision as the daemon does it: the
    forward and backward run on the fp32 masters rounded to `low`, each
    rank's gradient is rounded to `low`, their sum is rounded to `low`
    once, then averaged, clipped and applied to the fp32 masters.
    micro_batches: each rank's gradient accumulates over that many chunks
    of its rows, each loss divided by their number, in the trainer's order.
    """
    task = tt.Task(model_kind or ("deep" if deep else "mlp"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model = task.make_model()
        named = list(model.named_parameters())
        decay = [p for n, p in named if not task.no_weight_decay(n, p)]
        no_decay = [p for n, p in named if task.no_weight_decay(n, p)]
        torch_optimizer = tt.make_optimizer(optimizer, [{
            "params": decay
        }, {
            "params": no_decay,
            "weight_decay": 0.0
        }], lr=lr)
        scheduler = (torch.optim.lr_scheduler.LambdaLR(
            torch_optimizer, tt.schedule) if schedule else None)
        clipped = 0
        for step in range(1, STEPS + 1):
            per_rank = []
            masters = [p.detach().clone() for _, p in named]
            if low is not None:
                with torch.no_grad():
                    for _, p in named:
                        p.copy_(p.to(low))
            for rank in range(world_size):
                model.zero_grad(set_to_none=True)
                x, y = task.local_batch(step, rank, world_size)
                for xi, yi in zip(x.chunk(micro_batches),
                                  y.chunk(micro_batches)):
                    (task.loss(model(xi), yi) / micro_batches).backward()
                per_rank.append([
                    p.grad.clone() if low is None else p.grad.to(low).float()
                    for _, p in named
                ])
            with torch.no_grad():
                for (_, p), master in zip(named, masters):
                    p.copy_(master)
            for i, (_, p) in enumerate(named):
                total = per_rank[0][i]
                for grads in per_rank[1:]:
                    total = total + grads[i]
                if low is not None:
                    total = total.to(low).float()
                p.grad = total / world_size
            norm = nn.utils.clip_grad_norm_(model.parameters(),
                                            tt.MAX_GRAD_NORM)
            clipped += int(norm > tt.MAX_GRAD_NORM)
            torch_optimizer.step()
            if scheduler is not None:
                scheduler.step()
        assert clipped >= 1, clipped  # The clip is exercised.
        return {n: p.detach().clone() for n, p in named}
    finally:
        torch.set_num_threads(threads)


def check_against_reference(results, expected):
    for rank, result in enumerate(results):
        params = result["params"]
        assert sorted(params) == sorted(expected), rank
        for name, value in expected.items():
            diff = (params[name] - value).abs().max().item()
            assert diff <= TOLERANCE, (rank, name, diff)
        # Every rank gathered the same committed parameters.
        for name in expected:
            assert torch.equal(params[name], results[0]["params"][name])


def check_bit_identical(first, second):
    for a, b in zip(first, second):
        assert a["losses"] == b["losses"]
        assert a["norms"] == b["norms"]
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name


def test_full_shard_w2_matches_torch_and_repeats_bit_for_bit(tmp_path):
    """W = 2 FULL_SHARD, with a LambdaLR schedule driving the daemon's lr."""
    need_binaries()
    runs = [
        train(str(tmp_path / f"run{i}"), 2, 2, "FULL_SHARD", ["0", "2"],
              schedule=True)[0] for i in range(2)
    ]
    assert runs[0][0]["units"] == ["0", "2"]
    # The daemon stepped with the scheduler's learning rates.
    assert runs[0][0]["lrs"] == {
        s: tt.LR * tt.schedule(s - 1) for s in range(1, STEPS + 1)
    }
    expected = reference(2, schedule=True)
    # The schedule is exercised: a run without it ends elsewhere.
    plain = reference(2)
    assert any((plain[n] - v).abs().max().item() > 1e-4
               for n, v in expected.items())
    check_against_reference(runs[0], expected)
    check_bit_identical(runs[0], runs[1])
    # The parameters moved: the comparison is not vacuous.
    initial = dict(tt.make_model().named_parameters())
    for name, value in expected.items():
        assert (value - initial[name]).abs().max().item() > 1e-3, name


def test_wrap_waits_for_a_daemon_that_starts_later(tmp_path):
    """A sidecar or a supervisor may start the trainer before its daemon
    listens: wrap() waits for it (within register_timeout) instead of
    failing at the first refused connection."""
    need_binaries()
    c = Cluster(str(tmp_path))
    try:
        daemon_argv, socket = start_single_rank_job(c, str(tmp_path))
        with TrainerClient(socket, default_timeout=60,
                           register_timeout=60) as client:
            states = []
            # pylint: disable-next=protected-access
            client._channel.subscribe(states.append, try_to_connect=False)
            outcome = {}

            def register():
                try:
                    outcome["model"] = st.wrap(tt.make_model(), client,
                                               units=["0", "2"],
                                               optimizer=st.AdamW(lr=tt.LR))
                except Exception as e:  # pylint: disable=broad-except
                    outcome["error"] = e

            thread = threading.Thread(target=register)
            thread.start()
            # It tried to connect and found no daemon ...
            poll(lambda: (grpc.ChannelConnectivity.TRANSIENT_FAILURE in states
                          or outcome), START_SECONDS,
                 "a refused connection", c.procs)
            assert "error" not in outcome, outcome.get("error")
            # ... and registers once the daemon listens.
            c.start("shardd", daemon_argv)
            thread.join(timeout=120)
            assert not thread.is_alive()
            assert "error" not in outcome, outcome.get("error")
            assert outcome["model"].committed_step == 0
    finally:
        c.stop()


@pytest.mark.parametrize("strategy, sharding_factor, zero_copy",
                         [("NO_SHARD", 1, False), ("SHARD_GRAD_OP", 2, False),
                          ("FULL_SHARD", 2, True)])
def test_sgd_nesterov_w2_strategies(tmp_path, strategy, sharding_factor,
                                    zero_copy):
    """Three units (more than the default K = 2 gathered units; under
    SHARD_GRAD_OP each unit stays gathered from its forward to its backward
    Release, in a slot of its own), SGD with Nesterov momentum and weight
    decay against torch.optim.SGD: gradients are the same bits (W = 2) and
    SGD is linear in them, so only the clip scale's rounding differs.
    FULL_SHARD runs zero_copy (the two last Linear layers save views of
    their weights)."""
    need_binaries()
    (results, _), = [
        train(str(tmp_path / "run"), 2, sharding_factor, strategy,
              ["0", "2", "4"], optimizer="sgd", deep=True,
              zero_copy=zero_copy)
    ]
    if zero_copy:
        assert results[0]["stats"]["saved_views"] == 2 * STEPS
    assert results[0]["units"] == ["0", "2", "4"]
    check_against_reference(results,
                            reference(2, optimizer="sgd", deep=True))


def test_bf16_parameters_with_fp32_masters_w2(tmp_path):
    """param_dtype = bf16 (W = 2 FULL_SHARD, AdamW, lr = 1e-4).

    The FULL export holds the fp32 masters. The reference emulates the
    daemon's mixed precision (reference(low=...): the forward on the
    masters rounded to bf16, each rank's gradient rounded to bf16, their
    sum rounded once), so what is left is the clip scale's rounding (~1e-7
    relative of updates <= lr = 1e-4); 2e-10 is seen. BF16_TOLERANCE = 1e-8
    still catches a gradient rounded otherwise: one bf16 ulp (2^-8
    relative) moves an AdamW update after step 1 by ~lr * 2^-9 = 2e-7.
    Also: the gathered parameters are the masters rounded to bf16, and the
    masters are fp32 (they keep steps below half a bf16 ulp).
    """
    need_binaries()
    lr = 1e-4
    results, export_path = train(str(tmp_path / "run"), 2, 2, "FULL_SHARD",
                                 ["0", "2"], export=True,
                                 param_dtype="bfloat16", lr=lr)
    masters = st.load_export(export_path, results[0]["export_names"])
    expected = reference(2, low=torch.bfloat16, lr=lr)
    initial = dict(tt.make_model().named_parameters())
    for name, value in expected.items():
        diff = (masters[name] - value).abs().max().item()
        assert diff <= BF16_TOLERANCE, (name, diff)
        # The gathered parameters are the masters rounded to bf16.
        gathered = results[0]["params"][name]
        assert gathered.dtype == torch.bfloat16
        assert torch.equal(gathered, masters[name].to(torch.bfloat16))
        # fp32 masters: most steps are below half a bf16 ulp of the weight,
        # so bf16 masters would have lost them.
        moved = (masters[name] - initial[name]).abs()
        assert moved.max().item() > 1e-4, name
    # The steps made are smaller than the bf16 rounding of most weights.
    weight = initial["0.weight"]
    ulp = torch.finfo(torch.bfloat16).eps * weight.abs()
    moved = (masters["0.weight"] - weight).abs()
    assert (moved < ulp / 2).float().mean().item() > 0.5


def test_gradient_accumulation_over_micro_batches_w2(tmp_path):
    """Each rank's rows in 4 micro-batches (W = 2 FULL_SHARD, AdamW, clip):
    plain backward for the first three, model.backward for the last, so
    the daemon sees one ReduceGrad per unit of the accumulated gradient.

    The reference accumulates the same chunks' gradients (each loss
    divided by 4) into .grad in the same order with one thread, so each
    rank's gradient is the same bits on both sides, and TOLERANCE holds
    for the reasons the module docstring gives. A trainer that reduced
    only its last micro-batch's gradient (another direction, which AdamW's
    scale invariance does not hide) would miss by far more than 1e-5."""
    need_binaries()
    results, _ = train(str(tmp_path / "run"), 2, 2, "FULL_SHARD", ["0", "2"],
                       micro_batches=4)
    check_against_reference(results, reference(2, micro_batches=4))


GPT = dict(units=tt.GPT_UNITS.split(","), model="gpt")


def test_gpt_model_w2_full_shard_matches_torch_and_repeats(tmp_path):
    """The GPT example's model (tiny: 2 blocks, d_model 32, ~42k
    parameters; embeddings, LayerNorms, attention, GELU MLP, cross
    entropy over bytes of stdlib text), one unit per block and the rest in
    the root unit, W = 2 FULL_SHARD, AdamW with decay on matrices only and
    clipping: within TOLERANCE of torch.optim.AdamW + clip_grad_norm_ on the
    same global batches (the module docstring's argument holds: each
    rank's gradient is the same bits, the W = 2 average is exact), and two
    runs bit-identical."""
    need_binaries()
    runs = [train(str(tmp_path / name), 2, 2, "FULL_SHARD", **GPT)[0]
            for name in ("first", "second")]
    assert runs[0][0]["units"] == ["root"] + GPT["units"]
    check_against_reference(runs[0], reference(2, model_kind="gpt"))
    check_bit_identical(*runs)


def test_gpt_model_w4_hybrid_f2_matches_torch(tmp_path):
    """The same GPT model at W = 4 HYBRID_SHARD (F = 2): within TOLERANCE
    of the reference (the daemon groups the four per-rank gradients'
    sums its own way: 2^-24 relative per addition, see the docstring)."""
    need_binaries()
    results, _ = train(str(tmp_path / "run"), 4, 2, "HYBRID_SHARD", **GPT)
    check_against_reference(results, reference(4, model_kind="gpt"))


def test_initial_values_from_a_safetensors_file(tmp_path):
    """wrap(init=path): each daemon reads its shard from a torch state dict
    saved as safetensors (fqn names, the root unit's too), not the module's
    own values; at step 0 the gathered parameters are the file's."""
    need_binaries()
    torch.manual_seed(7)
    other = nn.Sequential(nn.Linear(tt.IN, tt.HIDDEN), nn.ReLU(),
                          nn.Linear(tt.HIDDEN, tt.OUT))
    path = str(tmp_path / "init.safetensors")
    st.save_safetensors(other.state_dict(), path)
    results, _ = train(str(tmp_path / "run"), 2, 2, "FULL_SHARD", ["2"],
                       steps=0, init=path)
    assert results[0]["units"] == ["root", "2"]
    own = dict(tt.make_model().named_parameters())
    for name, value in other.named_parameters():
        assert torch.equal(results[0]["params"][name], value), name
        assert not torch.equal(own[name], value), name


def test_a_job_continues_from_a_full_export_bit_for_bit(tmp_path):
    """3 steps, a FULL export with optimizer state; a new cluster (W = 2,
    a new job) wraps the model with load_from=that export and runs steps
    4..6: its parameters equal those of 6 steps in one job, bit for bit."""
    need_binaries()
    common = dict(world_size=2, sharding_factor=2, strategy="FULL_SHARD",
                  units=["2"])
    _, export_path = train(str(tmp_path / "first"), steps=3, export=True,
                           export_optimizer=True, **common)
    tensors, metadata = st.read_safetensors(export_path)
    assert metadata["optimizer_step"] == "3"
    assert "root.0.weight.exp_avg_sq" in tensors
    resumed, _ = train(str(tmp_path / "resumed"), load_from=export_path,
                       **common)
    whole, _ = train(str(tmp_path / "whole"), **common)
    for a, b in zip(whole, resumed):
        assert b["registered_step"] == 3 and sorted(b["losses"]) == [4, 5, 6]
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name


HYBRID = dict(world_size=4, sharding_factor=2, strategy="HYBRID_SHARD",
              units=["2"])


@pytest.fixture(scope="module")
def hybrid_run(tmp_path_factory):
    """The no-fault W = 4 HYBRID_SHARD (F = 2) run, with a FULL export."""
    need_binaries()
    # "2" is a unit; "0.weight" and "0.bias" fall into the root unit.
    return train(str(tmp_path_factory.mktemp("hybrid") / "run"), export=True,
                 **HYBRID)


def test_hybrid_shard_w4_f2_matches_torch_and_repeats(tmp_path, hybrid_run):
    first, _ = hybrid_run
    second, _ = train(str(tmp_path / "again"), **HYBRID)
    assert first[0]["units"] == ["root", "2"]
    check_against_reference(first, reference(4))
    check_bit_identical(first, second)


def test_full_export_loads_into_a_fresh_module(hybrid_run):
    results, export_path = hybrid_run
    # The FULL export, read back by fully qualified name, loads into a
    # fresh module and equals the trained parameters bit for bit.
    names = results[0]["export_names"]
    assert names == {"root.0.weight": "0.weight", "root.0.bias": "0.bias",
                     "2.weight": "2.weight", "2.bias": "2.bias"}
    state = st.load_export(export_path, names)
    fresh = nn.Sequential(nn.Linear(tt.IN, tt.HIDDEN), nn.ReLU(),
                          nn.Linear(tt.HIDDEN, tt.OUT))
    fresh.load_state_dict(state)
    for name, value in fresh.named_parameters():
        assert torch.equal(value, results[0]["params"][name]), name


def assert_same_export(want_path, got_path):
    """The two safetensors files hold the same metadata and tensors."""
    want, want_metadata = st.read_safetensors(want_path)
    got, got_metadata = st.read_safetensors(got_path)
    assert got_metadata == want_metadata
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert torch.equal(value, got[name]), name


def test_a_node_lost_during_a_full_export_every_rank_exports_again(
        tmp_path, hybrid_run):
    """SIGKILL rank 1's daemon after the first unit of the FULL export.

    W = 4, F = 2: only rank 0's shard group (ranks 0, 1) gathers for the
    file; ranks 2 and 3 finish their own gathers. Every rank ends with rank
    0's outcome (the export aborted), so every trainer's export() recovers
    (trainer 1 re-attaches to the replacement, which copies shard 1 from
    rank 3) and exports again; the file equals the no-fault run's. Before,
    ranks 2 and 3 returned from export() although no file was written.
    """
    clean, clean_export = hybrid_run
    faulty, export_path = train(str(tmp_path / "fault"), export=True,
                                kill_rank=1, failpoint="export.mid:kill",
                                **HYBRID)
    for rank, result in enumerate(faulty):
        assert result["stats"]["export_retries"] >= 1, rank
        for name, value in clean[rank]["params"].items():
            assert torch.equal(value, result["params"][name]), name
    assert_same_export(clean_export, export_path)


def test_rank_zeros_daemon_lost_after_writing_the_export_its_retry_finds_it(
        tmp_path, hybrid_run):
    """SIGKILL rank 0's daemon after it wrote the FULL export and published
    its outcome, before it answered its trainer (fail point
    export.concluded).

    Ranks 1, 2 and 3 learned the file was written and return OK; trainer 0
    sees its daemon gone, recovers (re-attaching to the replacement, which
    copies shard 0 from rank 2) and exports again. The replacement
    remembers nothing, but the others publish what they learned, and the
    file is there: the retry returns at once instead of offering an export
    nobody joins (before: FAILED_PRECONDITION "ranks 1, 2, 3 did not call
    ExportState" after the collective timeout). The file is the no-fault
    run's, tensor for tensor.
    """
    clean, clean_export = hybrid_run
    faulty, export_path = train(str(tmp_path / "fault"), export=True,
                                kill_rank=0, failpoint="export.concluded:kill",
                                **HYBRID)
    assert faulty[0]["stats"]["export_retries"] == 1
    for rank in (1, 2, 3):
        assert faulty[rank]["stats"]["export_retries"] == 0, rank
    for rank, result in enumerate(faulty):
        for name, value in clean[rank]["params"].items():
            assert torch.equal(value, result["params"][name]), name
    assert_same_export(clean_export, export_path)


@pytest.mark.parametrize("zero_copy", [False, True],
                         ids=["copy", "zero_copy"])
def test_daemon_killed_mid_training_trainers_redo_and_end_bit_equal(
        tmp_path, hybrid_run, zero_copy):
    """SIGKILL rank 1's daemon inside an AllGather (W = 4, F = 2).

    Its fail point fires in its 4th AllGather, in the middle of training;
    a replacement takes its socket and recovers shard 1 from rank 3. The
    torch trainers see StepAborted or DaemonUnavailable, recover()
    (trainer 1 re-attaches to the replacement) and redo the step with the
    same data: the parameters end bit-equal to the no-fault run.
    """
    clean, _ = hybrid_run
    faulty, _ = train(str(tmp_path / "fault"), kill_rank=1,
                      failpoint="allgather.mid:kill@4", zero_copy=zero_copy,
                      **HYBRID)
    assert faulty[1]["aborted"], "trainer 1 never saw its daemon die"
    assert all(r["aborted"] for r in faulty), "a step was not redone"
    for a, b in zip(clean, faulty):
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name
        # Every step's loss was computed on the same parameters.
        assert a["losses"] == b["losses"]


def test_trainer_killed_mid_step_restarts_and_reattaches(tmp_path,
                                                        hybrid_run):
    """SIGKILL rank 2's torch trainer inside step 4's ReduceGrad (W = 4).

    Its daemon stops itself (SIGSTOP) in its 7th reduce-scatter (2 per
    step: step 4's first); the trainer is killed, the daemon continued and
    a new trainer process started: it re-attaches at step 3 (the daemon
    keeps every shard), the daemon abandons the epoch so that every rank
    redoes step 4, and the parameters end bit-equal to the no-fault run.
    """
    clean, _ = hybrid_run
    faulty, _ = train(str(tmp_path / "fault"), kill_rank=2,
                      failpoint="reducescatter.mid:stop@7",
                      kill_trainer=True, **HYBRID)
    restarted = faulty[2]
    assert restarted["reattached"] and restarted["registered_step"] == 3
    assert sorted(restarted["losses"]) == list(range(4, STEPS + 1))
    for rank in (0, 1, 3):
        assert 4 in faulty[rank]["aborted"], rank
    for a, b in zip(clean, faulty):
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name
        for step, loss in b["losses"].items():
            assert loss == a["losses"][step], step


def test_trainer_stopped_mid_step_is_told_and_redoes_the_step(tmp_path,
                                                              hybrid_run):
    """Rank 2's torch trainer stops (SIGSTOP) after step 4's forward, its
    peers' collectives time out (3 s) and a new epoch forms; continued, it
    goes on with step 4's backward, which the daemon refuses (the attempt
    began in the old epoch): StepAborted, recover(), the step redone, and
    the parameters end bit-equal to the no-fault run."""
    clean, _ = hybrid_run
    faulty, _ = train(str(tmp_path / "stop"), stop_rank=2,
                      daemon_flags=["--collective_timeout_ms=3000"], **HYBRID)
    assert 4 in faulty[2]["aborted"]
    for a, b in zip(clean, faulty):
        for name, value in a["params"].items():
            assert torch.equal(value, b["params"][name]), name
        for step, loss in b["losses"].items():
            assert loss == a["losses"][step], step


def test_zero_copy_trainers_equal_the_copying_ones_bit_for_bit(
        tmp_path, hybrid_run):
    """zero_copy (W = 4, F = 2, a root unit around unit "2"): the module
    computes on the daemon's read-only buffers, its saved views of them are
    re-gathered in backward; same values, same ops: bit-equal results."""
    clean, _ = hybrid_run
    zero_copy, _ = train(str(tmp_path / "zero_copy"), zero_copy=True,
                         **HYBRID)
    check_bit_identical(clean, zero_copy)
    params = sum(v.numel() for v in clean[0]["params"].values())
    assert clean[0]["module_bytes"] == 4 * params  # A full copy...
    for result in zero_copy:
        assert result["module_bytes"] == 4 * 4  # ...or 4 placeholders.
        # In each step's forward the last Linear saves (a view of) its
        # weight, for the input's gradient, and backward gathers unit "2"
        # again for it; the first Linear's input needs no gradient, so it
        # saves no weight.
        assert result["stats"] == {"saved_views": STEPS,
                                   "backward_regathers": STEPS,
                                   "export_retries": 0}
