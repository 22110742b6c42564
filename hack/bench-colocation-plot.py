#!/usr/bin/env python3
"""Plots of the colocation benchmark (hack/bench-colocation.sh).

Reads OUT/<run>/timeseries.csv for every run directory under OUT and writes
OUT/colocation.png: one row per run, LS p99 latency per 250 ms window (left
axis, log scale) over BE work units per second and BE's CPU limit (right).
"""
import csv
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    def col(name):
        return [float(r[name]) if r[name] != "" else float("nan") for r in rows]
    return {name: col(name) for name in rows[0].keys()} if rows else None


def main(out):
    runs = sorted(d for d in os.listdir(out) if os.path.isfile(os.path.join(out, d, "timeseries.csv")))
    order = ["ls-alone", "no-agent", "koordlet-cfsquota", "upstream-cfsquota", "koordlet-cpuset", "upstream-cpuset", "koordlet-latency"]
    # With --repeat, later rounds sit in "<run>-roundN": the plot shows round 1.
    runs = [r for r in runs if "-round" not in r]
    runs.sort(key=lambda r: order.index(r) if r in order else len(order))
    if not runs:
        sys.exit(f"no run under {out} has a timeseries.csv")
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.6 * len(runs)), sharex=True, squeeze=False)
    for ax, run in zip(axes[:, 0], runs):
        data = read(os.path.join(out, run, "timeseries.csv"))
        if data is None:
            continue
        t = data["t_s"]
        ax.plot(t, data["ls_p99_ms"], color="tab:red", label="LS p99 (ms)")
        ax.set_yscale("log")
        ax.set_ylabel("LS p99 ms")
        ax.set_title(run, loc="left", fontsize=10)
        right = ax.twinx()
        right.plot(t, data["be_units_per_s"], color="tab:blue", alpha=0.7, label="BE units/s")
        right.set_ylabel("BE units/s")
        limit_axis = ax.twinx()
        limit_axis.spines["right"].set_position(("axes", 1.12))
        limit_axis.step(t, data["be_limit_cores"], color="tab:green", where="post", label="BE limit (cores)")
        limit_axis.plot(t, data["ls_cores"], color="tab:orange", alpha=0.6, label="LS cores")
        limit_axis.set_ylabel("cores")
        lines = ax.get_lines() + right.get_lines() + limit_axis.get_lines()
        ax.legend(lines, [l.get_label() for l in lines], loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("seconds into the load pattern")
    fig.tight_layout()
    target = os.path.join(out, "colocation.png")
    fig.savefig(target, dpi=90)
    print(f"plot: {target}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "target/bench-colocation")
