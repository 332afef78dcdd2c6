#!/usr/bin/python3
"""Plots of docs/benchmarks.md from bench/results/*.json, with gnuplot.

  bench_plots.py [--results DIR] [--out DIR] [NAME...]

NAME: step, torch_step, recovery, collectives (default: each whose JSON
exists). Writes OUT/bench-NAME.png (default docs/images). Each plot's
title names its JSON file and the time the benchmark wrote it, so the page
can say which run produced it. Needs gnuplot (scripts/install-deps installs
gnuplot-nox); standard library otherwise.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

WIDTH, HEIGHT = 960, 540
COLORS = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
          "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"]


def _human_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit}"
    return f"{n} B"


def _run_label(path):
    when = datetime.datetime.fromtimestamp(os.path.getmtime(path),
                                           datetime.timezone.utc)
    return f"{os.path.basename(path)} of {when:%Y-%m-%d %H:%M} UTC"


def _gnuplot(script, tmp):
    path = os.path.join(tmp, "plot.gp")
    with open(path, "w") as fh:
        fh.write(script)
    subprocess.run(["gnuplot", path], check=True, cwd=tmp)


def _header(out, title, xlabel="", ylabel=""):
    return "\n".join([
        f"set terminal pngcairo size {WIDTH},{HEIGHT} font 'DejaVu Sans,10' "
        f"noenhanced",
        f"set output '{out}'",
        f"set title \"{title}\" font ',11'",
        f"set xlabel \"{xlabel}\"",
        f"set ylabel \"{ylabel}\"",
        "set grid ytics lc rgb '#dddddd'",
        "set border 3",
        "set tics nomirror",
        "",
    ])


def _parts_of(row, key):
    """A row's value of `key` for the stack: a torch row splits its compute
    into forward, backward and optimizer, so its compute_ms is left out
    (it is their sum)."""
    if key == "compute_ms" and row.get("fwd_ms") is not None:
        return 0.0
    return float(row.get(key) or 0)


def _stacked(out, tmp, title, ylabel, labels, parts, series, note=""):
    """Stacked bars: `labels` (one bar each), `series` [(name, [values])]."""
    data = os.path.join(tmp, "stacked.dat")
    with open(data, "w") as fh:
        for i, label in enumerate(labels):
            fh.write(f'"{label}" ' + " ".join(
                f"{vals[i]:.6g}" for _, vals in series) + "\n")
    plots = []
    for j, (name, _) in enumerate(series):
        plots.append(f"'{data}' using {j + 2}:xtic(1) title '{name}' "
                     f"lc rgb '{COLORS[j % len(COLORS)]}'")
    script = _header(out, title, ylabel=ylabel) + "\n".join([
        "set style data histograms",
        "set style histogram rowstacked",
        "set style fill solid 0.9 border -1",
        "set boxwidth 0.7",
        "set key below horizontal",
        "set xtics rotate by -20 scale 0",
        "set yrange [0:*]",
        f"set label 1 \"{note}\" at graph 0.01, graph 0.95" if note else "",
        "plot " + ", ".join(plots),
        "",
    ])
    _gnuplot(script, tmp)


def plot_step(path, out, tmp):
    """bench/step: where each configuration's step goes, beside DDP."""
    rows = [r for r in json.load(open(path))["rows"]
            if r.get("what") == "breakdown"]
    parts = [("compute", "compute_ms"), ("blocked in Gather", "gather_ms"),
             ("blocked in ReduceGrad", "reduce_grad_ms"),
             ("blocked in Step", "step_call_ms"),
             ("rest of the client", "other_ms"),
             ("torch forward", "fwd_ms"),
             ("torch backward (DDP: with its all-reduce)", "bwd_ms"),
             ("torch optimizer", "opt_ms")]
    names = {"compute-only": "example trainer, compute only",
             "no_shard": "NO_SHARD", "full_shard": "FULL_SHARD",
             "full_shard_reshard_fwd": "FULL_SHARD, reshard after fwd",
             "full_shard_daemon_prefetch": "FULL_SHARD, daemon prefetch",
             "hybrid_shard": "HYBRID_SHARD",
             "torch compute-only": "torch, compute only",
             "ddp": "torch DDP"}
    labels = [names.get(r["row"], r["row"]) for r in rows]
    series = []
    for name, key in parts:
        values = [_parts_of(r, key) for r in rows]
        if any(values):
            series.append((name, values))
    title = (f"bench/step: a step's mean time per rank by configuration, "
             f"W = 4 ({_run_label(path)})")
    _stacked(out, tmp, title, "ms per step (mean over ranks)", labels, parts,
             series)


def plot_torch_step(path, out, tmp):
    """bench/torch_step: the same for torch trainers through shardd.torch."""
    rows = [r for r in json.load(open(path))["rows"]
            if r.get("what") == "breakdown" or "compute_ms" in r or
            "fwd_ms" in r]
    parts = [("compute", "compute_ms"), ("blocked in gather", "gather_ms"),
             ("blocked in reduce_grad", "reduce_grad_ms"),
             ("blocked in step", "step_call_ms"),
             ("rest of the client", "other_ms"),
             ("torch forward", "fwd_ms"),
             ("torch backward (DDP: with its all-reduce)", "bwd_ms"),
             ("torch optimizer", "opt_ms")]
    labels = [str(r.get("row") or r.get("name") or r.get("what"))
              for r in rows]
    series = []
    for name, key in parts:
        values = [_parts_of(r, key) for r in rows]
        if any(values):
            series.append((name, values))
    title = (f"bench/torch_step: a step's mean time per rank by row, W = 4 "
             f"({_run_label(path)})")
    _stacked(out, tmp, title, "ms per step (mean over ranks)", labels, parts,
             series)


def plot_recovery(path, out, tmp):
    """bench/recovery: kill -> training resumed, by phase and model."""
    rows = [r for r in json.load(open(path))["rows"]
            if r.get("what") == "recovery"]
    parts = [("detection", "detection_s"), ("join wait", "join_wait_s"),
             ("rendezvous", "rendezvous_s"), ("shard transfer", "transfer_s"),
             ("first step (redone)", "first_step_s")]
    labels = [f"{r['model']} ({r['shard_MB']:.0f} MB shard)" for r in rows]
    series = [(name, [float(r.get(key) or 0) for r in rows])
              for name, key in parts]
    title = (f"bench/recovery: SIGKILL of a daemon -> training resumed, "
             f"W = 4, F = 2 ({_run_label(path)})")
    _stacked(out, tmp, title, "seconds", labels, parts, series)


def plot_collectives(path, out, tmp):
    """bench/collectives: paired ratio to raw Gloo by size, per op and W."""
    rows = [r for r in json.load(open(path))["rows"]
            if "ratio_paired" in r and "op" in r]
    ops = []
    for r in rows:
        if r["op"] not in ops:
            ops.append(r["op"])
    script = [_header(out, "").replace(f"size {WIDTH},{HEIGHT}",
                                       f"size {WIDTH},{HEIGHT + 160}")]
    script.append("set multiplot layout 2,2 title \"bench/collectives: our "
                  "bus bandwidth over raw Gloo's (paired median; dashed: the "
                  f"A/A control) ({_run_label(path)})\"")
    script.append("set logscale x 2")
    sizes = sorted({int(r["bytes"]) for r in rows})
    script.append("set xtics (" + ", ".join(
        f"'{_human_bytes(b)}' {b}" for b in sizes) + ")")
    script.append(f"set xrange [{sizes[0] / 1.5:.0f}:{sizes[-1] * 1.5:.0f}]")
    # Below 1 MiB --quick runs few repetitions and the bar does not look:
    # ratios there can be far off; the plot keeps the bar's region legible.
    script.append("set yrange [0:2]")
    script.append("set key bottom right")
    if sizes[0] < 1 << 20:
        script.append("set object 1 rect from graph 0, graph 0 to first "
                      "1048576, graph 1 fc rgb '#f0f0f0' fs solid noborder "
                      "behind")
        script.append("set label 2 'the bar looks at >= 1 MiB' at first "
                      "1048576, graph 0.93 offset 0.5,0 font ',8'")
    for k, op in enumerate(ops):
        plots = []
        worlds = sorted({int(r["W"]) for r in rows if r["op"] == op})
        for i, w in enumerate(worlds):
            points = sorted((float(r["bytes"]), float(r["ratio_paired"]),
                             float(r.get("control_ratio_paired") or "nan"))
                            for r in rows if r["op"] == op and int(r["W"]) == w)
            data = os.path.join(tmp, f"c{k}_{w}.dat")
            with open(data, "w") as fh:
                for b, ratio, control in points:
                    fh.write(f"{b:.0f} {ratio:.6g} {control:.6g}\n")
            color = COLORS[i % len(COLORS)]
            plots.append(f"'{data}' using 1:2 with linespoints pt 7 ps 0.6 "
                         f"lc rgb '{color}' title 'W = {w}'")
            plots.append(f"'{data}' using 1:3 with lines dt 2 lc rgb "
                         f"'{color}' notitle")
        script.append(f"set title '{op}'")
        script.append("set xlabel 'buffer size'")
        script.append("set ylabel 'ratio to raw Gloo'")
        script.append("plot 1 with lines lc rgb '#888888' notitle, " +
                      ", ".join(plots))
    script.append("unset multiplot")
    _gnuplot("\n".join(script) + "\n", tmp)


PLOTS = {
    "step": plot_step,
    "torch_step": plot_torch_step,
    "recovery": plot_recovery,
    "collectives": plot_collectives,
}


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", default="bench/results")
    parser.add_argument("--out", default="docs/images")
    parser.add_argument("names", nargs="*")
    args = parser.parse_args(argv)
    names = args.names or [n for n in PLOTS if os.path.exists(
        os.path.join(args.results, n + ".json"))]
    for name in names:
        if name not in PLOTS:
            parser.error(f"no plot for '{name}' (known: {', '.join(PLOTS)})")
        path = os.path.join(args.results, name + ".json")
        if not os.path.exists(path):
            print(f"{path}: missing; run scripts/bench {name} first",
                  file=sys.stderr)
            return 1
        out = os.path.abspath(os.path.join(
            args.out, f"bench-{name.replace('_', '-')}.png"))
        with tempfile.TemporaryDirectory() as tmp:
            PLOTS[name](os.path.abspath(path), out, tmp)
        print(f"wrote {os.path.relpath(out)} from {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
