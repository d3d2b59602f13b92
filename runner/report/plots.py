"""The comparison's PNGs: step times, op breakdown, roofline, and the studies' plots. Labels sit on the data."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

from runner import names

matplotlib.use("Agg")  # files only; no display on build machines or cluster nodes
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from mlflow import MlflowClient  # noqa: E402
from mlflow.entities import Run  # noqa: E402

from runner.report.curves import Crossover, crossovers, size_curves  # noqa: E402
from runner.report.reader import (  # noqa: E402
    dollars_per_million_steps,
    label,
    metric,
    op_table,
    per_op,
    price_per_hour,
    variant,
)
from runner.report.scaling import CONTENTION_EFFICIENCY, ScalingPoint, contention_onset, scaling_curves  # noqa: E402

TOP_OPS = 6
FINISHED = "FINISHED"


def step_times(runs: list[Run], path: Path) -> Path:
    """Median step time per run as bars, with p10-p90 whiskers."""
    done = [r for r in runs if metric(r, names.STEP_MEDIAN_MS) is not None]
    fig, ax = plt.subplots(figsize=(9, 0.6 * len(done) + 1.6))
    medians = [metric(r, names.STEP_MEDIAN_MS) or 0.0 for r in done]
    low = [m - (metric(r, names.STEP_P10_MS) or m) for m, r in zip(medians, done, strict=True)]
    high = [(metric(r, names.STEP_P90_MS) or m) - m for m, r in zip(medians, done, strict=True)]
    bars = ax.barh([label(r) for r in done], medians, xerr=[low, high], color="#4c78a8", capsize=4)
    ax.bar_label(bars, labels=[f"{m:.4f} ms" for m in medians], padding=6)
    ax.invert_yaxis()
    ax.set_xlabel("steady-state step time, ms (bar: median; whiskers: p10 to p90)")
    ax.set_title("Step time per run")
    ax.set_xlim(0, max([m + h for m, h in zip(medians, high, strict=True)] or [1]) * 1.35)
    return _save(fig, path)


def op_breakdown(client: MlflowClient, runs: list[Run], path: Path) -> Path:
    """Self time per step, stacked by op; the ops that matter most across runs, the rest as 'other'."""
    done = [r for r in runs if r.info.status == FINISHED]
    tables = {r.info.run_id: per_op(op_table(client, r), metric(r, names.PROFILER_ACTIVE_STEPS) or 1) for r in done}
    totals: dict[str, float] = {}
    for ops in tables.values():
        for name, stats in ops.items():
            totals[name] = totals.get(name, 0.0) + stats.self_ms_per_step
    top = sorted(totals, key=lambda n: totals[n], reverse=True)[:TOP_OPS]
    colors = [plt.get_cmap("tab10")(i) for i in range(10)]
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(done) + 2.2))
    for row, run in enumerate(done):
        ops = tables[run.info.run_id]
        widths = [ops[n].self_ms_per_step if n in ops else 0.0 for n in top]
        widths.append(sum(s.self_ms_per_step for n, s in ops.items() if n not in top))
        left = 0.0
        total = sum(widths) or 1.0
        for index, (name, width) in enumerate(zip([*top, "other"], widths, strict=True)):
            color = colors[index % len(colors)] if name != "other" else "#bbbbbb"
            ax.barh(row, width, left=left, color=color, label=name if row == 0 else None)
            if width / total > 0.12:
                ax.text(left + width / 2, row, name.replace("aten::", ""), ha="center", va="center", fontsize=8)
            left += width
    ax.set_yticks(range(len(done)), [label(r) for r in done])
    ax.invert_yaxis()
    ax.set_xlabel("self time per profiled step, ms (device time when reported, else CPU)")
    ax.set_title("Where each run's time goes, by op")
    if done:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=4, fontsize=8, frameon=False)
    return _save(fig, path)


def roof(bandwidth: float, gflops: float, x_low: float, x_high: float) -> tuple[list[float], list[float]]:
    """The ceiling min(intensity x bandwidth, peak) between two intensities, as a polyline.

    The ridge is clamped into the plotted range, so a range that starts past the ridge
    (compute-bound workloads) draws the flat compute roof only.
    """
    ridge = min(max(gflops / bandwidth, x_low), x_high)
    xs = [x_low, ridge, x_high]
    return xs, [min(x * bandwidth, gflops) for x in xs]


def roofline(runs: list[Run], path: Path) -> Path:
    """Each run as a point (FLOP/byte, GFLOP/s) under its device's bandwidth and compute ceilings."""
    done = [r for r in runs if metric(r, names.ROOFLINE_INTENSITY) is not None]
    fig, ax = plt.subplots(figsize=(9, 6))
    ceilings = {
        (metric(r, names.ROOFLINE_PEAK_GBPS) or 1.0, metric(r, names.ROOFLINE_PEAK_GFLOPS) or 1.0) for r in done
    }
    intensities = [metric(r, names.ROOFLINE_INTENSITY) or 1.0 for r in done] or [1.0]
    x_low, x_high = (
        min(intensities) / 10,
        max(max(intensities) * 10, max((f / b for b, f in ceilings), default=10) * 10),
    )
    for bandwidth, gflops in sorted(ceilings):
        ridge = gflops / bandwidth
        ax.plot(*roof(bandwidth, gflops, x_low, x_high), color="#444444", linewidth=1.5)
        ax.annotate(
            f"{bandwidth:.0f} GB/s, {gflops:.0f} GFLOP/s (ridge {ridge:.1f} FLOP/B)",
            (ridge, gflops),
            textcoords="offset points",
            xytext=(6, 6),
            fontsize=8,
        )
    for index, run in enumerate(done):
        x, y = metric(run, names.ROOFLINE_INTENSITY) or 0.0, metric(run, names.ROOFLINE_ACHIEVED_GFLOPS) or 0.0
        point = ax.scatter([x], [y], s=40, zorder=3)
        # runs of one workload share an intensity: stagger their labels so none hides another
        ax.annotate(
            f"{label(run)} ({y:.1f} GFLOP/s)",
            (x, y),
            textcoords="offset points",
            xytext=(8, -14 * (index + 1)),
            fontsize=8,
            color=point.get_facecolor()[0],
            arrowprops={"arrowstyle": "-", "color": "#999999", "linewidth": 0.5},
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity, FLOP/byte (workload cost model)")
    ax.set_ylabel("achieved GFLOP/s (steady-state median)")
    ax.set_title("Roofline: each run against its device's ceilings")
    return _save(fig, path)


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (lower is better), fastest first."""
    front: list[int] = []
    for index in sorted(range(len(points)), key=lambda i: points[i]):
        if not front or points[index][1] < points[front[-1]][1]:
            front.append(index)
    return front


def cost_frontier(runs: list[Run], path: Path) -> Path:
    """$/1M steps against median step time for runs with a price; the Pareto frontier joined.

    Whiskers span p10 to p90 of the step distribution on both axes (cost is step time times
    price); a run is on the frontier when no other run is both faster and cheaper.
    """
    priced = [
        (run, price, median)
        for run in runs
        if (price := price_per_hour(run)) is not None and (median := metric(run, names.STEP_MEDIAN_MS)) is not None
    ]
    points = [(median, dollars_per_million_steps(price, median)) for _, price, median in priced]
    front = pareto_front(points)
    fig, ax = plt.subplots(figsize=(9, 6))
    for index, (run, price, median) in enumerate(priced):
        low, high = metric(run, names.STEP_P10_MS) or median, metric(run, names.STEP_P90_MS) or median
        x, y = points[index]
        ax.errorbar(
            [x],
            [y],
            xerr=[[x - low], [high - x]],
            yerr=[[y - dollars_per_million_steps(price, low)], [dollars_per_million_steps(price, high) - y]],
            fmt="o",
            color="#e45756" if index in front else "#4c78a8",
            capsize=3,
        )
        ax.annotate(f"{label(run)} (${price:g}/h)", (x, y), textcoords="offset points", xytext=(8, 6), fontsize=8)
    ax.plot([points[i][0] for i in front], [points[i][1] for i in front], color="#e45756", linewidth=1, zorder=0)
    spread = max(p[0] for p in points) / min(p[0] for p in points) if points else 1.0
    if spread > 20:
        ax.set_xscale("log")
        ax.set_yscale("log")
    ax.set_xlabel("steady-state step time, ms (point: median; whiskers: p10 to p90)")
    ax.set_ylabel("$ per 1M steps (backend.price_per_hour)")
    ax.set_title("Cost frontier: red runs are not beaten on both time and cost")
    return _save(fig, path)


def shape_curves(curves: dict[str, list[Run]], found: list[Crossover], path: Path) -> Path:
    """Achieved GB/s and fraction of peak against bytes moved per variant; compilations and crossovers marked."""
    fig, (speed, share) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    for name, runs in curves.items():
        sizes = [metric(r, names.ROOFLINE_BYTES) or 0.0 for r in runs]
        (line,) = speed.plot(sizes, [metric(r, names.ROOFLINE_ACHIEVED_GBPS) or 0.0 for r in runs], "o-", label=name)
        fractions = [100 * (metric(r, names.ROOFLINE_BANDWIDTH_FRACTION) or 0.0) for r in runs]
        share.plot(sizes, fractions, "o-", color=line.get_color(), label=name)
        # where the job compiled graphs (in one process, every size after the first recompiles)
        for run, size in zip(runs, sizes, strict=True):
            if graphs := metric(run, names.COMPILE_GRAPHS):
                gbps = metric(run, names.ROOFLINE_ACHIEVED_GBPS) or 0.0
                speed.scatter([size], [gbps], marker="x", s=90, color="black", zorder=4)
                text = f"compiled {graphs:.0f} graph{'s' if graphs > 1 else ''}"
                speed.annotate(text, (size, gbps), textcoords="offset points", xytext=(6, -12), fontsize=7)
    for crossover in found:
        middle = math.sqrt(crossover.bytes_low * crossover.bytes_high)
        for axis in (speed, share):
            axis.axvline(middle, color="#888888", linestyle="--", linewidth=1)
        speed.annotate(
            f"{crossover.after}\novertakes {crossover.before}",
            (middle, 0.95),
            xycoords=("data", "axes fraction"),
            fontsize=7,
            ha="center",
            va="top",
        )
    speed.set_xscale("log")
    speed.set_ylabel("achieved GB/s (steady-state median)")
    speed.set_title("Shape curves: where each variant's bandwidth goes as the size grows")
    speed.legend(fontsize=8)
    share.set_xlabel("bytes moved per step (workload cost model)")
    share.set_ylabel("% of the device's bandwidth peak")
    return _save(fig, path)


def core_scaling(curves: dict[str, list[ScalingPoint]], path: Path) -> Path:
    """Summed throughput against copies with the linear line, and efficiency with contention marked."""
    fig, (speed, share) = plt.subplots(2, 1, figsize=(9, 8), sharex=True)
    for name, points in curves.items():
        levels = [p.copies for p in points]
        (line,) = speed.plot(levels, [p.throughput for p in points], "o-", label=name)
        speed.plot(levels, [points[0].throughput * k for k in levels], "--", color=line.get_color(), linewidth=1)
        share.plot(levels, [100 * p.efficiency for p in points], "o-", color=line.get_color(), label=name)
        if onset := contention_onset(points):
            share.axvline(onset, color=line.get_color(), linestyle=":", linewidth=1)
            share.annotate(f"contention ({name})", (onset, 0.05), xycoords=("data", "axes fraction"), fontsize=7)
    share.axhline(100 * CONTENTION_EFFICIENCY, color="#888888", linestyle="--", linewidth=1)
    speed.set_xscale("log", base=2)
    speed.set_ylabel("steps/s, all copies together (dashed: linear)")
    speed.set_title("Core scaling: copies side by side, each on its own share of the machine")
    speed.legend(fontsize=8)
    share.set_xlabel("copies (measure.copies)")
    share.set_ylabel("efficiency against linear, %")
    return _save(fig, path)


def rank_steps(step_ms: list[list[float]], path: Path) -> Path:
    """Each rank's timed steps in the order they ran, with its median: where the ranks part ways."""
    fig, ax = plt.subplots(figsize=(10, 4.5))
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(step_ms))]
    for rank, (samples, color) in enumerate(zip(step_ms, colors, strict=True)):
        median = sorted(samples)[len(samples) // 2]
        ax.plot(range(1, len(samples) + 1), samples, color=color, linewidth=0.8, label=f"rank {rank}")
        ax.axhline(median, color=color, linestyle="--", linewidth=0.8)
    ax.set_xlabel("timed step (steady state, in order)")
    ax.set_ylabel("step time, ms (dashed: median)")
    ax.set_title("Step time per rank")
    ax.legend(loc="upper right")
    return _save(fig, path)


def queue_curves(runs: list[Run]) -> dict[str, list[Run]]:
    """Per variant with throughput runs at two queue depths or more, its runs by depth."""
    by_variant: dict[str, list[Run]] = {}
    for run in runs:
        if metric(run, names.THROUGHPUT_INFLIGHT) is not None and metric(run, names.THROUGHPUT_STEPS_PER_S):
            by_variant.setdefault(variant(run), []).append(run)
    return {
        name: sorted(found, key=lambda r: metric(r, names.THROUGHPUT_INFLIGHT) or 0)
        for name, found in by_variant.items()
        if len({metric(r, names.THROUGHPUT_INFLIGHT) for r in found}) >= 2
    }


def queue_depth(curves: dict[str, list[Run]], path: Path) -> Path:
    """Steps per second against the wait for a block's results, one point per queue depth."""
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for name, found in curves.items():
        latency = [metric(r, names.THROUGHPUT_BLOCK_MS) or 0.0 for r in found]
        rate = [metric(r, names.THROUGHPUT_STEPS_PER_S) or 0.0 for r in found]
        (line,) = ax.plot(latency, rate, marker="o", label=name)
        for run, x, y in zip(found, latency, rate, strict=True):
            depth = metric(run, names.THROUGHPUT_INFLIGHT) or 0
            ax.annotate(f"{depth:.0f}", (x, y), xytext=(4, 4), textcoords="offset points", color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("wait for a block's results, ms (steps queued per synchronize at each point)")
    ax.set_ylabel("steps per second")
    ax.set_title("Queue depth: throughput against latency")
    ax.legend(loc="best")
    return _save(fig, path)


def layer_errors(table: dict[str, list[Any]], path: Path) -> Path:
    """Normwise relative error of each layer's output, in call order, against the tolerance."""
    errors = [max(e, 1e-18) for e in table["max_rel_err"]]  # exact zeros still show on a log axis
    passed = table["pass"]
    fig, ax = plt.subplots(figsize=(max(8, 0.25 * len(errors) + 3), 5))
    ax.plot(range(len(errors)), errors, color="#4c78a8", linewidth=0.8)
    ax.scatter(range(len(errors)), errors, c=["#4c78a8" if ok else "#e45756" for ok in passed], s=14, zorder=3)
    ax.axhline(table["tolerance"][0], color="#e45756", linestyle="--", linewidth=0.8, label="tolerance")
    failing = next((i for i, ok in enumerate(passed) if not ok), None)
    if failing is not None:
        ax.annotate(f"first over: {table['layer'][failing]}", (failing, errors[failing]), xytext=(8, -14),
                    textcoords="offset points", color="#e45756")  # fmt: skip
    step = max(1, len(errors) // 30)  # a readable number of names on the axis
    ax.set_xticks(range(0, len(errors), step), [table["layer"][i] for i in range(0, len(errors), step)],
                  rotation=60, ha="right", fontsize=7)  # fmt: skip
    ax.set_yscale("log")
    ax.set_ylabel("max |out - ref| / max |ref|")
    ax.set_title("Error through the layers (float64 CPU reference, same weights and inputs)")
    ax.legend(loc="upper left")
    return _save(fig, path)


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_plots(
    client: MlflowClient, runs: list[Run], out_dir: str | Path, found: list[Crossover] | None = None
) -> list[Path]:
    """Write step_time.png, op_breakdown.png, roofline.png, and the study plots where they apply.

    cost_frontier.png needs runs with backend.price_per_hour, shape_curves.png a variant run at
    three sizes or more, core_scaling.png a variant run with measure.copies 1 and more,
    queue_depth.png a variant run in throughput mode at two queue depths or more.
    `found`: the shape curves' crossovers, when the caller has them already (they read every
    run's per-process medians from the store).
    """
    out = Path(out_dir)
    written = [
        step_times(runs, out / "step_time.png"),
        op_breakdown(client, runs, out / "op_breakdown.png"),
        roofline(runs, out / "roofline.png"),
    ]
    if any(price_per_hour(run) is not None for run in runs):
        written.append(cost_frontier(runs, out / "cost_frontier.png"))
    if curves := size_curves(runs):
        found = crossovers(client, curves) if found is None else found
        written.append(shape_curves(curves, found, out / "shape_curves.png"))
    if scaling := scaling_curves(runs):
        written.append(core_scaling(scaling, out / "core_scaling.png"))
    if queues := queue_curves(runs):
        written.append(queue_depth(queues, out / "queue_depth.png"))
    return written
