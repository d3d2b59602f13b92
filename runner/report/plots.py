"""The comparison's PNGs: step times, op breakdown, roofline, and the studies' plots.

Each plot returns a `Figure` (tests read its texts); `save` writes one. No text may sit on another or leave
the image: names go in a legend kept inside the figure, labels on the data through `_keep_apart`.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from matplotlib.artist import Artist
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.text import Annotation
from matplotlib.ticker import MaxNLocator
from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.job import JobStatus
from runner.measure.traces import label_of
from runner.report.curves import Crossover, crossovers, size_curves
from runner.report.reader import dollars_per_million_steps, label, metric, op_table, per_op, price_per_hour, variant
from runner.report.scaling import CONTENTION_EFFICIENCY, ScalingPoint, contention_onset, scaling_curves
from runner.report.series import Series

# the PNGs' resolution; figures are built at it too, so text measured while laying out fits in the file
_DPI = 110
TOP_OPS = 6
_OTHER_COLOR = "#bbbbbb"
_FRONTIER_COLOR = "#e45756"
# run labels are override lists: wrapped at this many characters, a legend or tick label stays narrower than the figure
_WRAP_CHARS = 50
_MARKERS = "osD^vP*Xh<>"  # with the ten colours C0-C9, up to 110 runs get a marker and colour pair of their own
# offsets in points tried for a label at a point: above, right, below, left, then the diagonals
_AROUND = [(0.0, 5.0), (5.0, 0.0), (0.0, -5.0), (-5.0, 0.0), (4.0, 4.0), (4.0, -4.0), (-4.0, 4.0), (-4.0, -4.0)]
# for a label on a line: just above or below it, then further out
_ALONG = [(0.0, sign * (3.0 + 12.0 * level)) for level in range(4) for sign in (1.0, -1.0)]
# for a label at the foot of a vertical line: right of it, stacking upwards, then left of it
_BESIDE = [(side * 3.0, 3.0 + 11.0 * level) for side in (1.0, -1.0) for level in range(5)]
_CENTERED = [(0.0, 0.0)]
_DASHES = ["--", ":", "-.", (0, (5, 1, 1, 1, 1, 1))]


def _figure(width: float, height: float, rows: int = 1) -> tuple[Figure, list[Axes]]:
    """A column of `rows` axes sharing x, in a figure for the Agg renderer (no pyplot state, nothing to close)."""
    fig = Figure(figsize=(width, height), dpi=_DPI, layout="constrained")
    return fig, list(fig.subplots(rows, sharex=True, squeeze=False)[:, 0])


def _wrap(text: str) -> str:
    return textwrap.fill(text, _WRAP_CHARS, break_long_words=False, break_on_hyphens=False)


def _row_height(labels: list[str]) -> float:
    """Inches per bar row, so that the tallest wrapped tick label keeps clear of its neighbours."""
    lines = max((text.count("\n") + 1 for text in labels), default=1)
    return max(0.6, 0.2 * lines + 0.25)


def _run_style(index: int) -> dict[str, Any]:
    return {"color": f"C{index % 10}", "marker": _MARKERS[index % len(_MARKERS)]}


def _legend_below(fig: Figure, entries: list[tuple[Artist, str]]) -> None:
    """Name each entry's handle under the plots, in as many columns as fit; the figure grows by the legend's height."""
    if not entries:
        return
    handles = [handle for handle, _ in entries]
    wrapped = [_wrap(text) for _, text in entries]
    for columns in range(len(wrapped), 0, -1):
        legend = fig.legend(handles, wrapped, loc="outside lower center", ncol=columns, fontsize=8, frameon=False)
        for text in legend.get_texts():
            text.set_parse_math(False)  # entries are names and prices, never math: "$1.34/h" stays as written
        box = legend.get_window_extent()
        if box.width <= 0.98 * fig.bbox.width or columns == 1:
            break
        legend.remove()
    fig.set_figheight(fig.get_figheight() + box.height / _DPI)


def _keep_apart(fig: Figure, placements: list[tuple[Annotation, Artist]], offsets: list[tuple[float, float]]) -> None:
    """Move each annotation to the first offset (points) where it lies inside its area and clear of other text.

    An offset's signs pick the side ((5, 0): right of the point). Annotations no offset fits are hidden;
    earlier ones win a spot.
    """
    for text, _ in placements:
        text.set_in_layout(False)  # moving or hiding a label must not move the axes it was measured in
    fig.draw_without_rendering()  # runs constrained layout, so the boxes below are the saved file's
    moving = {id(text) for text, _ in placements}
    others = [other for axes in fig.axes for other in axes.texts if id(other) not in moving]
    taken = [other.get_window_extent().padded(1) for other in others if other.get_visible() and other.get_text()]
    for text, area in placements:
        bounds = area.get_window_extent().padded(-1)
        for dx, dy in offsets:
            text.xyann = (dx, dy)
            text.set_horizontalalignment("left" if dx > 0 else "right" if dx < 0 else "center")
            text.set_verticalalignment("bottom" if dy > 0 else "top" if dy < 0 else "center")
            box = text.get_window_extent()
            inside = bounds.x0 <= box.x0 and box.x1 <= bounds.x1 and bounds.y0 <= box.y0 and box.y1 <= bounds.y1
            if inside and not any(box.overlaps(other) for other in taken):
                taken.append(box.padded(1))
                break
        else:
            text.set_visible(False)


def _label_at(
    axes: Axes, text: str, xy: tuple[float, float], area: Artist | None = None, **style: Any
) -> tuple[Annotation, Artist]:
    """A label for `_keep_apart` to place, offset in points from `xy` (data, or as `xycoords` says), and its area."""
    return axes.annotate(text, xy, xytext=(0, 0), textcoords="offset points", **style), area or axes


def step_time_figure(runs: list[Run]) -> Figure:
    """Median step time per run as bars, with p10-p90 whiskers."""
    done = [r for r in runs if metric(r, names.STEP_MEDIAN_MS) is not None]
    labels = [_wrap(label(r)) for r in done]
    fig, (ax,) = _figure(9, _row_height(labels) * len(done) + 1.6)
    medians = [metric(r, names.STEP_MEDIAN_MS) or 0.0 for r in done]
    low = [m - (metric(r, names.STEP_P10_MS) or m) for m, r in zip(medians, done, strict=True)]
    high = [(metric(r, names.STEP_P90_MS) or m) - m for m, r in zip(medians, done, strict=True)]
    bars = ax.barh(labels, medians, xerr=[low, high], color="#4c78a8", capsize=4)
    ax.bar_label(bars, labels=[f"{m:.4f} ms" for m in medians], padding=6)
    ax.invert_yaxis()
    ax.set(xlabel="steady-state step time, ms (bar: median; whiskers: p10 to p90)", title="Step time per run")
    ax.set_xlim(0, max([m + h for m, h in zip(medians, high, strict=True)] or [1]) * 1.35)
    return fig


def _self_ms_by_op(client: MlflowClient, run: Run) -> dict[str, float]:
    """The run's self time per profiled step by op label (ops the labels cannot tell apart merged)."""
    merged: defaultdict[str, float] = defaultdict(float)
    for name, stats in per_op(op_table(client, run), metric(run, names.PROFILER_ACTIVE_STEPS) or 1).items():
        # the label without the profiler's `## Call ... ##` wrapper: the runs' `CompiledFxGraph <hash>` share one colour
        merged[label_of(name).removeprefix("## Call ").removesuffix(" ##")] += stats.self_ms_per_step
    return dict(merged)


def op_breakdown_figure(client: MlflowClient, runs: list[Run]) -> Figure:
    """Self time per step, stacked by op (the top ops across runs, the rest as 'other'); all named in the legend."""
    done = [r for r in runs if r.info.status == JobStatus.FINISHED]
    tables = [_self_ms_by_op(client, r) for r in done]
    totals: Counter[str] = Counter()
    for ops in tables:
        totals.update(ops)
    top = [name for name, _ in totals.most_common(TOP_OPS)]
    colors = [f"C{index}" for index in range(len(top))] + [_OTHER_COLOR]
    labels = [_wrap(label(r)) for r in done]
    fig, (ax,) = _figure(11, _row_height(labels) * len(done) + 1.4)
    segments: list[tuple[Annotation, Artist]] = []
    for row, ops in enumerate(tables):
        widths = [ops.get(n, 0.0) for n in top] + [sum(ms for n, ms in ops.items() if n not in top)]
        left = 0.0
        for name, width, color in zip([*top, "other"], widths, colors, strict=True):
            (bar,) = ax.barh(row, width, left=left, color=color)
            if width > 0:
                segments.append(_label_at(ax, name.removeprefix("aten::"), (left + width / 2, row), bar, fontsize=8))
            left += width
    ax.set_yticks(range(len(done)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("self time per profiled step, ms (device time when reported, else CPU)")
    ax.set_title("Where each run's time goes, by op")
    if done:
        _legend_below(fig, [(Patch(color=color), name) for color, name in zip(colors, [*top, "other"], strict=True)])
    _keep_apart(fig, segments, _CENTERED)
    return fig


def roof(bandwidth: float, gflops: float, x_low: float, x_high: float) -> tuple[list[float], list[float]]:
    """The ceiling min(intensity x bandwidth, peak) between two intensities, as a polyline (the ridge clamped in)."""
    ridge = min(max(gflops / bandwidth, x_low), x_high)
    xs = [x_low, ridge, x_high]
    return xs, [min(x * bandwidth, gflops) for x in xs]


def roofline_figure(runs: list[Run]) -> Figure:
    """Each run as a point under its device's ceilings, named in the legend: runs of one workload share a place."""
    done = [r for r in runs if metric(r, names.ROOFLINE_INTENSITY) is not None]
    fig, (ax,) = _figure(9, 6)
    ceilings = {
        (metric(r, names.ROOFLINE_PEAK_GBPS) or 1.0, metric(r, names.ROOFLINE_PEAK_GFLOPS) or 1.0) for r in done
    }
    intensities = [metric(r, names.ROOFLINE_INTENSITY) or 1.0 for r in done] or [1.0]
    x_low = min(intensities) / 10
    x_high = max(max(intensities) * 10, max((f / b for b, f in ceilings), default=10) * 10)
    notes: list[tuple[Annotation, Artist]] = []
    for bandwidth, gflops in sorted(ceilings):
        xs, ys = roof(bandwidth, gflops, x_low, x_high)
        ax.plot(xs, ys, color="#444444", linewidth=1.5)
        flat_middle = math.sqrt(xs[1] * x_high)  # xs[1]: the ridge, clamped into view
        text = f"{bandwidth:.0f} GB/s, {gflops:.0f} GFLOP/s (ridge {gflops / bandwidth:.1f} FLOP/B)"
        notes.append(_label_at(ax, text, (flat_middle, gflops), fontsize=8))
    entries: list[tuple[Artist, str]] = []
    for index, run in enumerate(done):
        x, y = metric(run, names.ROOFLINE_INTENSITY) or 0.0, metric(run, names.ROOFLINE_ACHIEVED_GFLOPS) or 0.0
        point = ax.scatter([x], [y], s=40, zorder=3, **_run_style(index))
        entries.append((point, f"{label(run)} ({y:.3g}\N{NO-BREAK SPACE}GFLOP/s)"))  # the value wraps with its unit
    ax.set(xscale="log", yscale="log", ylabel="achieved GFLOP/s (steady-state median)")
    ax.set_xlabel("arithmetic intensity, FLOP/byte (workload cost model)")
    ax.set_title("Roofline: each run against its device's ceilings")
    _legend_below(fig, entries)
    _keep_apart(fig, notes, _ALONG)
    return fig


def pareto_front(points: list[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both axes (lower is better), fastest first."""
    front: list[int] = []
    for index in sorted(range(len(points)), key=lambda i: points[i]):
        if not front or points[index][1] < points[front[-1]][1]:
            front.append(index)
    return front


def cost_frontier_figure(runs: list[Run]) -> Figure:
    """$/1M steps against median step time for runs with a price (whiskers p10 to p90); the Pareto frontier joined."""
    priced = [
        (run, price, median)
        for run in runs
        if (price := price_per_hour(run)) is not None and (median := metric(run, names.STEP_MEDIAN_MS)) is not None
    ]
    points = [(median, dollars_per_million_steps(price, median)) for _, price, median in priced]
    front = pareto_front(points)
    fig, (ax,) = _figure(9, 6)
    entries: list[tuple[Artist, str]] = []
    for index, (run, price, median) in enumerate(priced):
        low, high = metric(run, names.STEP_P10_MS) or median, metric(run, names.STEP_P90_MS) or median
        x, y = points[index]
        style = _run_style(index)
        (point,) = ax.plot([x], [y], linestyle="none", **style)
        yerr = [[y - dollars_per_million_steps(price, low)], [dollars_per_million_steps(price, high) - y]]
        ax.errorbar([x], [y], xerr=[[x - low], [high - x]], yerr=yerr, fmt="none", ecolor=style["color"], capsize=3)
        where = ", on the frontier" if index in front else ""
        entries.append((point, f"{label(run)} (${price:g}/h: ${y:.3g} per 1M steps{where})"))
    (frontier,) = ax.plot(
        [points[i][0] for i in front], [points[i][1] for i in front], color=_FRONTIER_COLOR, linewidth=1, zorder=0
    )
    spread = max(p[0] for p in points) / min(p[0] for p in points) if points else 1.0
    if spread > 20:
        ax.set(xscale="log", yscale="log")
    ax.set_xlabel("steady-state step time, ms (point: median; whiskers: p10 to p90)")
    ax.set_ylabel("$ per 1M steps (backend.price_per_hour)")
    ax.set_title("Cost frontier: runs on the red line are not beaten on both time and cost")
    _legend_below(fig, [*entries, (frontier, "frontier: no other run is both faster and cheaper")])
    return fig


def shape_curves_figure(curves: dict[str, list[Run]], found: list[Crossover]) -> Figure:
    """Achieved GB/s and fraction of peak against bytes moved per variant; compilations and crossovers marked."""
    fig, (speed, share) = _figure(9, 8, rows=2)
    entries: list[tuple[Artist, str]] = []
    colors = {}
    compiled_at: list[tuple[float, float]] = []
    for name, runs in curves.items():
        sizes = [metric(r, names.ROOFLINE_BYTES) or 0.0 for r in runs]
        rates = [metric(r, names.ROOFLINE_ACHIEVED_GBPS) or 0.0 for r in runs]
        (line,) = speed.plot(sizes, rates, "o-")
        fractions = [100 * (metric(r, names.ROOFLINE_BANDWIDTH_FRACTION) or 0.0) for r in runs]
        share.plot(sizes, fractions, "o-", color=line.get_color())
        entries.append((line, name))
        colors[name] = line.get_color()
        # where the job compiled graphs (in one process, every size after the first recompiles)
        graphs = [metric(r, names.COMPILE_GRAPHS) for r in runs]
        compiled_at += [(s, r) for s, r, count in zip(sizes, rates, graphs, strict=True) if count]
    if compiled_at:
        xs, ys = zip(*compiled_at, strict=True)
        entries.append((speed.scatter(xs, ys, marker="x", s=90, color="black", zorder=4), "x: the job compiled graphs"))
    for crossover, dashes in zip(found, itertools.cycle(_DASHES), strict=False):
        middle = math.sqrt(crossover.bytes_low * crossover.bytes_high)
        style: dict[str, Any] = {"color": colors.get(crossover.after, "#888888"), "linestyle": dashes}
        entries.append((speed.axvline(middle, linewidth=1.2, **style), f"crossover: {crossover.line()}"))
        share.axvline(middle, linewidth=1.2, **style)
    speed.set(xscale="log", ylabel="achieved GB/s (steady-state median)")
    speed.set_title("Shape curves: where each variant's bandwidth goes as the size grows")
    share.set(xlabel="bytes moved per step (workload cost model)", ylabel="% of the device's bandwidth peak")
    _legend_below(fig, entries)
    return fig


def core_scaling_figure(curves: dict[str, list[ScalingPoint]]) -> Figure:
    """Summed throughput against copies with the linear line, and efficiency with contention marked."""
    fig, (speed, share) = _figure(9, 8, rows=2)
    entries: list[tuple[Artist, str]] = []
    notes: list[tuple[Annotation, Artist]] = []
    for name, points in curves.items():
        levels = [p.copies for p in points]
        (line,) = speed.plot(levels, [p.throughput for p in points], "o-")
        speed.plot(levels, [points[0].throughput * k for k in levels], "--", color=line.get_color(), linewidth=1)
        share.plot(levels, [100 * p.efficiency for p in points], "o-", color=line.get_color())
        entries.append((line, name))
        if unstable := [p for p in points if not p.stable]:  # drawn, but hollow: no finding (scaling.md says so)
            share.plot([p.copies for p in unstable], [100 * p.efficiency for p in unstable], "o",
                       color=line.get_color(), markerfacecolor="white")  # fmt: skip
        if onset := contention_onset(points):
            share.axvline(onset, color=line.get_color(), linestyle=":", linewidth=1)
            text = f"contention ({name})"
            where: dict[str, Any] = {"xycoords": ("data", "axes fraction"), "fontsize": 7, "color": line.get_color()}
            notes.append(_label_at(share, text, (onset, 0.05), **where))
    if any(not p.stable for points in curves.values() for p in points):
        (hollow,) = share.plot([], [], "o", color="#888888", markerfacecolor="white")
        entries.append((hollow, "hollow: timing unstable, efficiency not stated"))
    share.axhline(100 * CONTENTION_EFFICIENCY, color="#888888", linestyle="--", linewidth=1)
    speed.set_xscale("log", base=2)
    speed.set_ylabel("steps/s, all copies together (dashed: linear)")
    speed.set_title("Core scaling: copies side by side, each on its own share of the machine")
    share.set(xlabel="copies (measure.copies)", ylabel="efficiency against linear, %")
    _legend_below(fig, entries)
    _keep_apart(fig, notes, _BESIDE)
    return fig


def rank_steps_figure(step_ms: list[list[float]]) -> Figure:
    """Each rank's timed steps in the order they ran, with its median: where the ranks part ways."""
    fig, (ax,) = _figure(10, 4.5)
    entries: list[tuple[Artist, str]] = []
    for rank, samples in enumerate(step_ms):
        color = f"C{rank % 10}"
        median = sorted(samples)[len(samples) // 2]
        (line,) = ax.plot(range(1, len(samples) + 1), samples, color=color, linewidth=0.8)
        entries.append((line, f"rank {rank}"))
        ax.axhline(median, color=color, linestyle="--", linewidth=0.8)
    ax.set(xlabel="timed step (steady state, in order)", ylabel="step time, ms (dashed: median)")
    ax.set_title("Step time per rank")
    _legend_below(fig, entries)
    return fig


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


def queue_depth_figure(curves: dict[str, list[Run]]) -> Figure:
    """Steps per second against the wait for a block's results, each point labelled with its queue depth."""
    fig, (ax,) = _figure(9, 5.5)
    entries: list[tuple[Artist, str]] = []
    notes: list[tuple[Annotation, Artist]] = []
    for name, found in curves.items():
        latency = [metric(r, names.THROUGHPUT_BLOCK_MS) or 0.0 for r in found]
        rate = [metric(r, names.THROUGHPUT_STEPS_PER_S) or 0.0 for r in found]
        (line,) = ax.plot(latency, rate, marker="o")
        entries.append((line, name))
        for run, x, y in zip(found, latency, rate, strict=True):
            depth = metric(run, names.THROUGHPUT_INFLIGHT) or 0
            notes.append(_label_at(ax, f"{depth:.0f}", (x, y), color=line.get_color()))
    ax.set(xscale="log", ylabel="steps per second", title="Queue depth: throughput against latency")
    ax.set_xlabel("wait for a block's results, ms (steps queued per synchronize at each point)")
    _legend_below(fig, entries)
    _keep_apart(fig, notes, _AROUND)
    return fig


def layer_errors_figure(table: dict[str, list[Any]]) -> Figure:
    """Normwise relative error of each layer's output, in call order, against the tolerance."""
    errors = [max(e, 1e-18) for e in table["max_rel_err"]]  # exact zeros still show on a log axis
    passed = table["pass"]
    fig, (ax,) = _figure(max(8, 0.25 * len(errors) + 3), 5)
    ax.plot(range(len(errors)), errors, color="#4c78a8", linewidth=0.8)
    ax.scatter(range(len(errors)), errors, c=["#4c78a8" if ok else "#e45756" for ok in passed], s=14, zorder=3)
    tolerance = ax.axhline(table["tolerance"][0], color="#e45756", linestyle="--", linewidth=0.8)
    step = max(1, len(errors) // 30)  # a readable number of names on the axis
    # upright names: their boxes, unlike slanted ones, do not reach over their neighbours'
    ax.set_xticks(range(0, len(errors), step), [table["layer"][i] for i in range(0, len(errors), step)],
                  rotation=90, fontsize=7)  # fmt: skip
    ax.set(yscale="log", ylabel="max |out - ref| / max |ref|")
    ax.set_title("Error through the layers (float64 CPU reference, same weights and inputs)")
    _legend_below(fig, [(tolerance, "tolerance")])
    failing = next((i for i, ok in enumerate(passed) if not ok), None)
    if failing is not None:
        note = _label_at(ax, f"first over: {table['layer'][failing]}", (failing, errors[failing]), color="#e45756")
        _keep_apart(fig, [note], _AROUND)
    return fig


def history_figure(series: Series, key: str) -> Figure:
    """A configuration's runs in order with their intervals, each segment's level, and the commit at each step."""
    fig, (ax,) = _figure(10, 4.8)
    entries: list[tuple[Artist, str]] = []
    left_out = [k for k in range(len(series.points)) if k not in series.used]
    kinds = (("run", "#4c78a8", series.used), ("left out of the change points", "white", left_out))
    for text, face, chosen in kinds:
        if not chosen:
            continue
        values = [series.points[k].value for k in chosen]
        intervals = [series.points[k].interval or (v, v) for k, v in zip(chosen, values, strict=True)]
        spread = [[v - low for v, (low, _) in zip(values, intervals, strict=True)],
                  [high - v for v, (_, high) in zip(values, intervals, strict=True)]]  # fmt: skip
        bars = ax.errorbar(chosen, values, yerr=spread, fmt="o", color="#4c78a8", markerfacecolor=face, capsize=3)
        with_bars = any(series.points[k].interval for k in chosen)
        # the points: the legend names them, the bars' meaning is in the label
        entries.append((bars.lines[0], text + (" (bar: 95% interval from its worker processes)" if with_bars else "")))
    for segment in series.segments():
        level = math.exp(sum(math.log(series.points[k].value) for k in segment) / len(segment))
        (line,) = ax.plot([segment[0] - 0.4, segment[-1] + 0.4], [level, level], color=_FRONTIER_COLOR, linewidth=1.5)
    if series.steps:
        entries.append((line, "segment level (geometric mean of its runs)"))
    notes: list[tuple[Annotation, Artist]] = []
    for step in series.steps:
        at = series.points.index(step.after) - 0.5
        ax.axvline(at, color="#888888", linestyle="--", linewidth=1)
        where: dict[str, Any] = {"xycoords": ("data", "axes fraction"), "fontsize": 8, "color": "#444444"}
        notes.append(_label_at(ax, f"{step.after.commit[:8]} {step.change.change:+.1%}", (at, 0.03), **where))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # one run: one integer in view
    ax.set_xlabel("run, oldest first (dashed: a change point, labelled with the first commit after it)")
    ax.set(ylabel=key, title=_wrap(f"{series.label} ({series.config_hash[:8]}): {len(series.steps)} change point(s)"))
    _legend_below(fig, entries)
    _keep_apart(fig, notes, _BESIDE)
    return fig


def save(fig: Figure, path: Path) -> Path:
    """Write the figure as a PNG at _DPI, making its folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=_DPI)
    return path


def write_plots(
    client: MlflowClient, runs: list[Run], out_dir: str | Path, found: list[Crossover] | None = None
) -> list[Path]:
    """Write step_time.png, op_breakdown.png, roofline.png, and the study plots where their runs are there.

    `found`: the shape curves' crossovers, when the caller has them already (they read every run's rounds).
    """
    out = Path(out_dir)
    written = [
        save(step_time_figure(runs), out / names.STEP_TIME_PLOT_FILE),
        save(op_breakdown_figure(client, runs), out / names.OP_BREAKDOWN_PLOT_FILE),
        save(roofline_figure(runs), out / names.ROOFLINE_PLOT_FILE),
    ]
    if any(price_per_hour(run) is not None for run in runs):
        written.append(save(cost_frontier_figure(runs), out / names.COST_FRONTIER_PLOT_FILE))
    if curves := size_curves(runs):
        found = crossovers(client, curves) if found is None else found
        written.append(save(shape_curves_figure(curves, found), out / names.SHAPE_CURVES_PLOT_FILE))
    if scaling := scaling_curves(runs):
        written.append(save(core_scaling_figure(scaling), out / names.CORE_SCALING_PLOT_FILE))
    if queues := queue_curves(runs):
        written.append(save(queue_depth_figure(queues), out / names.QUEUE_DEPTH_PLOT_FILE))
    return written
