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
