"""bench/torch_step.py's own arithmetic, without daemons or trainers: the
table and JSON in bench/bench_report.h's shape, and how step times and
client shares are summarized (the bench itself: scripts/bench torch_step)."""

import importlib.util
import json
import os

from conftest import REPO

spec = importlib.util.spec_from_file_location(
    "torch_step", os.path.join(REPO, "bench", "torch_step.py"))
ts = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ts)


def test_report_has_the_shape_of_the_cc_benches():
    rows = [{"row": "a", "F": 4, "step_ms": 90.0},
            {"row": "b", "F": 2, "step_ms": 127.5, "client_share": 0.7}]
    text, js = ts.report("torch_step", rows,
                         {"z": 1.0, "a_ratio": 1.4166666666666667,
                          "nan": float("nan")})
    parsed = json.loads(js)
    assert parsed == {"name": "torch_step",
                      "figures": {"a_ratio": 1.416666667, "nan": None,
                                  "z": 1},
                      "rows": rows}
    assert list(parsed["figures"]) == ["a_ratio", "nan", "z"]  # Sorted.
    lines = text.splitlines()
    assert lines[0] == "== torch_step =="
    assert lines[1].split() == ["row", "F", "step_ms", "client_share"]
    assert lines[2].split() == ["a", "4", "90", "-"]  # Missing cell: "-".
    assert lines[3].split() == ["b", "2", "127.5", "0.7"]
    assert "  a_ratio = 1.417" in lines


def test_summarize_takes_the_slowest_rank_and_the_median_over_rounds():
    def rank(times, hooks=None):
        return [{"step": i + 1, "seconds": t, "loss": 1.0,
                 **({"hooks": hooks * t, "rpc": 0.5 * hooks * t}
                    if hooks is not None else {})}
                for i, t in enumerate(times)]
    # Step 1 is warm-up. Slowest rank per step: round 1 -> 0.2, 0.3;
    # round 2 -> 0.1, 0.4; the median of [0.2, 0.3, 0.1, 0.4] is 0.25.
    round1 = [rank([9.0, 0.2, 0.1], 0.6)] + [rank([9.0, 0.1, 0.3], 0.8)] * 3
    round2 = [rank([9.0, 0.1, 0.4], 0.6)] + [rank([9.0, 0.05, 0.1], 0.8)] * 3
    out = ts.summarize([round1, round2], warmup=1)
    assert abs(out["step_ms"] - 250.0) < 1e-9
    assert abs(out["client_share"] - (0.6 + 3 * 0.8) / 4) < 1e-9
    assert abs(out["rpc_share"] - out["client_share"] / 2) < 1e-9
    assert abs(out["python_share"] - out["client_share"] / 2) < 1e-9
    ddp = ts.summarize([[rank([1.0, 0.2])] * 4], warmup=1)
    assert "client_share" not in ddp and abs(ddp["step_ms"] - 200.0) < 1e-9


def test_breakdown_means_per_rank_then_over_ranks_and_adds_up():
    def shardd_rank(scale):
        # Step 1 is warm-up (huge, left out). Per step: 0.1 s in the
        # client's gather, 0.2 in reduce_grad, 0.05 in step, 0.03 in
        # release and 0.02 of the client's own code: t_client 0.4.
        return [{"step": 1, "seconds": 99.0, "t_client": 0.0, "t_gather": 0,
                 "t_reduce_grad": 0, "t_step": 0, "t_release": 0,
                 "hooks": 0, "rpc": 0, "loss": 1.0}] + [
            {"step": s, "seconds": scale * (0.5 + 0.4), "loss": 1.0,
             "hooks": 0.4, "rpc": 0.38,
             "t_client": scale * 0.4, "t_gather": scale * 0.1,
             "t_reduce_grad": scale * 0.2, "t_step": scale * 0.05,
             "t_release": scale * 0.03} for s in (2, 3)]
    # Ranks 0-1 at scale 1, ranks 2-3 at scale 2 (mean scale 1.5); two
    # rounds, the same.
    ranks = [shardd_rank(1), shardd_rank(1), shardd_rank(2), shardd_rank(2)]
    out = ts.breakdown([ranks, ranks], warmup=1)
    expected = {"rank_step_ms": 1350, "compute_ms": 750, "gather_ms": 150,
                "reduce_grad_ms": 300, "step_call_ms": 75,
                "other_ms": 75, "release_ms": 45}
    assert out.keys() == expected.keys()
    for key, value in expected.items():
        assert abs(out[key] - value) < 1e-9, key
    parts = ("compute_ms", "gather_ms", "reduce_grad_ms", "step_call_ms",
             "other_ms")
    assert abs(sum(out[k] for k in parts) - out["rank_step_ms"]) < 1e-9


def test_breakdown_of_plain_torch_rows():
    def rank(local):
        return [{"step": s, "seconds": 0.6, "fwd": 0.1, "bwd": 0.2,
                 "opt": 0.3, "loss": 1.0, **({"local": True} if local else {})}
                for s in (1, 2)]
    ddp = ts.breakdown([[rank(False)] * 4], warmup=0)
    assert sorted(ddp) == ["bwd_ms", "fwd_ms", "opt_ms", "rank_step_ms"]
    assert abs(ddp["opt_ms"] - 300) < 1e-9
    local = ts.breakdown([[rank(True)] * 4], warmup=0)
    assert abs(local["compute_ms"] - 600) < 1e-9  # All of it is compute.


def test_compute_only_step_is_the_slowest_ranks_median():
    # Unsynchronised ranks: per step the slowest would be 0.3, 0.3, 0.3
    # (each step's noise); the slowest rank's median is 0.2.
    times = [[0.1, 0.1, 0.3], [0.2, 0.2, 0.1], [0.1, 0.3, 0.2],
             [0.3, 0.1, 0.1]]
    ranks = [[{"step": i + 1, "seconds": t, "loss": 1.0, "local": True}
              for i, t in enumerate(r)] for r in times]
    assert abs(ts.summarize([ranks], warmup=0)["step_ms"] - 200) < 1e-9
    synced = [[{k: v for k, v in s.items() if k != "local"} for s in r]
              for r in ranks]
    assert abs(ts.summarize([synced], warmup=0)["step_ms"] - 300) < 1e-9


def test_exposed_figures():
    figures = ts.exposed_figures({"compute": 300.0, "ddp": 400.0,
                                  "no_shard": 500.0, "full_shard": 450.0,
                                  "hybrid_shard": 420.0})
    assert figures == {"exposed_comm_ms_ddp": 100.0,
                       "exposed_comm_ms_no_shard": 200.0,
                       "exposed_comm_ms_full_shard": 150.0,
                       "exposed_comm_ms_hybrid_shard": 120.0,
                       "exposed_comm_ratio_no_shard_to_ddp": 2.0,
                       "exposed_comm_ratio_full_shard_to_ddp": 1.5,
                       "exposed_comm_ratio_hybrid_shard_to_ddp": 1.2}
    hidden = ts.exposed_figures({"compute": 300.0, "ddp": 290.0,
                                 "no_shard": 500.0})
    assert hidden["exposed_comm_ms_ddp"] == -10.0
    assert hidden["exposed_comm_ratio_no_shard_to_ddp"] != (
        hidden["exposed_comm_ratio_no_shard_to_ddp"])  # NaN: no meaning.


def test_machine_lines_are_what_bench_step_parses():
    rows = [{"row": ts.COMPUTE_LABEL, "F": 1, "step_ms": 300.25,
             "compute_ms": 290.0},
            {"row": "torch DDP (gloo)", "F": 4, "step_ms": 400.0,
             "exposed_comm_ms": 99.75}]
    assert ts.machine_lines(rows) == [
        "torch_row name=compute F=1 step_ms=300.25 compute_ms=290",
        "torch_row name=ddp F=4 step_ms=400 exposed_comm_ms=99.75"]


def test_both_models_have_four_linear_units():
    for model in ts.MODELS:
        net = ts.make_model(model)
        linears = [n for n, m in net.named_children()
                   if type(m).__name__ == "Linear"]
        assert linears == ts.UNITS
    widths = [m.in_features for m in ts.make_model("step")
              if type(m).__name__ == "Linear"]
    assert widths == [2048] * 4
    x, _ = ts.local_batch(1, 3, "step")
    assert tuple(x.shape) == (64, 2048)  # 64 per rank, as bench/step.
