"""The comparison as a table: one row per run with its speedup against a baseline, the per-op diff of two, rendered.

A sweep's end logs it to its parent run (`runner.report.sweep_report`); `python -m runner.compare`
prints it, and the gate and the history render their own rows with `render`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.job import JobStatus
from runner.measure.stability import MAX_UNCERTAINTY, MIN_EARLIER_RUNS
from runner.measure.stats import SIGNIFICANCE, mann_whitney_p
from runner.report.pairing import (
    compare_times,
    earlier_sweeps,
    with_earlier_sweeps,
    with_stated_intervals,
    with_workers_spread,
)
from runner.report.reader import (
    OpStats,
    Rounds,
    dollars_per_million_steps,
    label,
    metric,
    op_table,
    per_op,
    price_per_hour,
    rounds,
    share_rounds,
)

FORMATS = ("table", "markdown", "csv", "json")
SPEEDUP = "speedup (95% CI)"
TEST = "test"  # which test the speedup comes from: paired by round, or unpaired
STABLE = "stable"  # timing.stable as yes / NO
# a speedup whose interval holds 1 and reaches past 5% either way: the comparison asked for is not resolved
_NOT_RESOLVED = "no significant difference"
# one whose interval holds 1 within 5% either way: resolved, as no difference a user would bet on
_SAME = f"the same within {MAX_UNCERTAINTY:.0%}"
# what narrows a speedup's interval, for the sweep's note and the flag of a job whose comparison is not resolved
NARROWING = (
    "an interval narrows with the square root of the rounds: 4x as many (measure.processes) would about halve it, "
    "and one widened by earlier sweeps (its test says so) narrows as each sweep measures longer (measure.steps_s)"
)
_MEDIAN = "median ms ± IQR"  # the speedup and its test follow this column


def _fmt(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _median(run: Run) -> str:
    median, iqr = metric(run, names.STEP_MEDIAN_MS), metric(run, names.STEP_IQR_MS)
    return "-" if median is None else f"{median:.4f} ± {iqr or 0:.4f}"


def _device_per_step(run: Run) -> float | None:
    total, steps = metric(run, names.DEVICE_SELF_TOTAL_MS), metric(run, names.PROFILER_ACTIVE_STEPS)
    return total / steps if total is not None and steps else None


def _lowering(run: Run) -> str:
    counts = ((names.OPS_DEVICE_KERNELS, "kernels"), (names.NEURON_NEFF_FILES, "NEFFs"))
    found = [f"{count:.0f} {what}" for key, what in counts if (count := metric(run, key)) is not None]
    return ", ".join([f"{_fmt(metric(run, names.OPS_ATEN), 0)} aten", *found])


def _memory(run: Run) -> str:
    device = metric(run, names.PEAK_DEVICE_MB)
    return _fmt(device, 1, " dev") if device is not None else _fmt(metric(run, names.PEAK_HOST_RSS_MB), 0, " host")


def _ranks(run: Run) -> str:
    """Ranks, straggler ratio, collective share and overlap, and the slowest rank of a multi-rank job."""
    count = metric(run, names.RANKS)
    if count is None:
        return "-"
    ratio, share = metric(run, names.RANKS_STRAGGLER_RATIO), metric(run, names.RANKS_COLLECTIVE_SHARE)
    overlap = metric(run, names.RANKS_COLLECTIVE_OVERLAP)
    slowest = run.data.tags.get(names.TAG_SLOWEST_RANK, "-")
    collective = "-" if share is None else f"{share:.0%}"
    overlapped = "" if overlap is None else f" ({overlap:.0%} overlapped)"
    return f"{count:.0f}: x{ratio or 0:.2f} max/median, {collective} collective{overlapped}, slowest {slowest}"


def _cost(run: Run) -> str:
    price, median = price_per_hour(run), metric(run, names.STEP_MEDIAN_MS)
    return "-" if price is None or median is None else f"${dollars_per_million_steps(price, median):.4f}"


# each column's header and how to read it off a run
_COLUMNS: dict[str, Callable[[Run], Any]] = {
    "run": label,
    "status": lambda r: r.info.status,
    "backend": lambda r: f"{r.data.tags.get(names.TAG_BACKEND, '-')} ({r.data.tags.get(names.TAG_DEVICE, '-')})",
    _MEDIAN: _median,
    # what timed it, and so the speedup, the GB/s and the roofline: the host's clock or the device's events
    "step clock": lambda r: r.data.tags.get(names.TAG_STEP_CLOCK, "-"),
    STABLE: lambda r: {"true": "yes", "false": "NO"}.get(r.data.tags.get(names.TAG_TIMING_STABLE, ""), "-"),
    "device ms/step": lambda r: _fmt(_device_per_step(r), 4),
    "lowering": _lowering,
    "top op": lambda r: _short(r.data.tags.get(names.TAG_TOP_OP, "-")),
    "first call s": lambda r: _fmt(metric(r, names.FIRST_CALL_S)),
    "graphs": lambda r: _fmt(metric(r, names.COMPILE_GRAPHS), 0),
    "peak MB": _memory,
    "GB/s": lambda r: _fmt(metric(r, names.ROOFLINE_ACHIEVED_GBPS), 2),
    "roofline": lambda r: _percent(metric(r, names.ROOFLINE_BANDWIDTH_FRACTION)),
    "accuracy": lambda r: r.data.tags.get(names.TAG_ACCURACY, "-"),
    "overhead": lambda r: _fmt(metric(r, names.PROFILER_OVERHEAD_PCT), 1, "%"),
    "ranks": _ranks,
    "busbw GB/s": lambda r: _fmt(metric(r, names.COLLECTIVE_BUSBW_GBPS), 3),
    "of link": lambda r: _percent(metric(r, names.COLLECTIVE_BUSBW_LINK_FRACTION)),
    "$/1M steps": _cost,
}


def _short(text: str, width: int = 32) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _percent(fraction: float | None) -> str:
    return _fmt(None if fraction is None else fraction * 100, 1, "%")


def speedup(client: MlflowClient, run: Run, baseline: Run | None, samples: dict[str, Rounds]) -> tuple[str, str]:
    """The baseline's step time over the run's, with its 95% interval, or why there is none; and its test.

    Printed only with an interval that excludes no change, never between unpaired unstable runs (a bare ratio
    of two medians can be a mode flip). Runs sharing rounds pair round by round even when unstable: a slow
    stretch fell on both and cancels in that round's ratio, not what each worker saw within itself, which the
    interval is at least; what moved between sweeps does not cancel either, so earlier sweeps
    of the same pair widen the interval to where the next sweep may land. Runs timed apart take in both runs'
    stated intervals: the host's drift between them, which no longer flags either run.
    """
    if baseline is None:
        return "-", "-"
    unfinished = next((r for r in (run, baseline) if r.info.status != JobStatus.FINISHED), None)
    if unfinished is not None:
        return f"not compared: {'run' if unfinished is run else 'baseline'} {unfinished.info.status}", "-"
    if metric(run, names.STEP_MEDIAN_MS) is None or metric(baseline, names.STEP_MEDIAN_MS) is None:
        return "-", "-"
    if run.info.run_id == baseline.info.run_id:
        return "baseline", "-"
    unstable = [r for r in (baseline, run) if r.data.tags.get(names.TAG_TIMING_STABLE) == "false"]
    paired = share_rounds(samples[baseline.info.run_id], samples[run.info.run_id])
    if unstable and not paired:
        return f"not compared: {'baseline' if unstable[0] is baseline else 'run'} unstable", "-"
    comparison = compare_times(samples[baseline.info.run_id], samples[run.info.run_id])
    estimate, test = comparison.estimate, comparison.test
    if estimate is None:
        need = "2 rounds in common" if paired else "measure.processes >= 2 in both runs"
        return f"not compared: needs {need}", test
    if paired:
        spreads = metric(baseline, names.WORKER_SPREAD_PCT), metric(run, names.WORKER_SPREAD_PCT)
        floored = with_workers_spread(estimate, *spreads)
        if floored.low < estimate.low:
            estimate, test = floored, f"{test}, at least its workers' spread"
    earlier = earlier_sweeps(client, run, baseline) if paired else []
    if len(earlier) >= MIN_EARLIER_RUNS:
        estimate = with_earlier_sweeps(estimate, earlier)
        test += f", {len(earlier)} earlier sweeps"
    elif not paired and (widened := with_stated_intervals(estimate, baseline, run)) is not estimate:
        estimate, test = widened, f"{test}, with both runs' intervals"
    interval = f"[{1 / estimate.high:.2f}, {1 / estimate.low:.2f}]"
    note = " (timing unstable)" if unstable else ""
    if not estimate.significant:
        within = estimate.low >= 1 / (1 + MAX_UNCERTAINTY) and estimate.high <= 1 + MAX_UNCERTAINTY
        return f"{_SAME if within else _NOT_RESOLVED} {interval}{note}", test
    return f"{1 / estimate.ratio:.2f}x {interval}{note}", test


def comparison_rows(
    client: MlflowClient, runs: list[Run], baseline: Run | None, parent: Run | None = None
) -> list[dict[str, str]]:
    """One row per run: its rank by median (1 = fastest), its speedup against `baseline`, reused by `parent`'s sweep."""
    samples = {run.info.run_id: rounds(client, run) for run in runs}
    medians = sorted(m for m in (metric(r, names.STEP_MEDIAN_MS) for r in runs) if m is not None)
    rows = []
    for run in runs:
        median = metric(run, names.STEP_MEDIAN_MS)
        row = {"rank": str(medians.index(median) + 1) if median is not None else "-"}
        for header, value in _COLUMNS.items():
            row[header] = str(value(run))
            if header == _MEDIAN:  # the speedup beside the medians it is the ratio of
                row[SPEEDUP], row[TEST] = speedup(client, run, baseline, samples)
        if parent is not None and run.data.tags.get("mlflow.parentRunId") != parent.info.run_id:  # resume reused it
            row["status"] += " (reused)"
        row["run id"] = run.info.run_id
        rows.append(row)
    return rows


def without_empty_columns(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows less the columns that read "-" in every row: a terminal or markdown table fits on a screen.

    CSV and JSON keep every column, so a program reading them finds the same keys whatever the runs recorded.
    """
    kept = [h for h in (rows[0] if rows else {}) if any(row[h] != "-" for row in rows)]
    return [{h: row[h] for h in kept} for row in rows]


def unresolved(row: dict[str, str]) -> bool:
    """Whether the row's speedup interval holds 1 and reaches past 5%: the comparison asked for is not resolved."""
    return row[SPEEDUP].startswith(_NOT_RESOLVED)


def unresolved_note(rows: list[dict[str, str]]) -> str | None:
    """What would narrow the intervals that hold 1 (None: every comparison is resolved)."""
    names_unresolved = [row["run"] for row in rows if unresolved(row)]
    if not names_unresolved:
        return None
    past = f"the 95% interval holds 1 and reaches past {MAX_UNCERTAINTY:.0%}"
    return f"not resolved: {', '.join(names_unresolved)} against the baseline ({past}); {NARROWING}"


def render(rows: list[dict[str, str]], fmt: str) -> str:
    """The rows as an aligned table, markdown, CSV or JSON."""
    if fmt == "json":
        return json.dumps(rows, indent=2)
    headers = list(rows[0]) if rows else list(_COLUMNS)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=headers)
        writer.writeheader()
        writer.writerows(rows)
        return out.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
        lines += ["| " + " | ".join(row[h].replace("|", "\\|") for h in headers) + " |" for row in rows]
        return "\n".join(lines)
    widths = {h: max([len(h), *(len(row[h]) for row in rows)]) for h in headers}
    lines = ["  ".join(h.ljust(widths[h]) for h in headers)]
    lines += ["  ".join(row[h].ljust(widths[h]) for h in headers) for row in rows]
    return "\n".join(line.rstrip() for line in lines)  # no padding past the last column's text


def op_diff(client: MlflowClient, a: Run, b: Run) -> list[dict[str, str]]:
    """Per-op differences from run a to run b, largest change in self time first; tested where both have cycles.

    Both runs' op tables must be there (`runner.report.selection.missing_op_table`): a missing one reads as empty.
    """
    ops_a = per_op(op_table(client, a), metric(a, names.PROFILER_ACTIVE_STEPS) or 1)
    ops_b = per_op(op_table(client, b), metric(b, names.PROFILER_ACTIVE_STEPS) or 1)
    rows = []
    for name in ops_a.keys() | ops_b.keys():
        before, after = ops_a.get(name), ops_b.get(name)
        old, new = before or OpStats(), after or OpStats()
        ms_a, ms_b = old.self_ms_per_step, new.self_ms_per_step
        if old.cycle_samples and new.cycle_samples:
            p = mann_whitney_p(old.cycle_samples, new.cycle_samples)
            verdict = f"{'significant' if p < SIGNIFICANCE else 'n.s.'} (p={p:.3f})"
        else:
            verdict = "n/a (needs schedule.repeat > 1 in both runs)" if before and after else "-"
        rows.append({
            "op": name,
            "change": "gone" if after is None else "new" if before is None else "",
            "calls/step": f"{old.calls_per_step:g} -> {new.calls_per_step:g}",
            "self ms/step": f"{ms_a:.4f} -> {ms_b:.4f}",
            "delta ms": f"{ms_b - ms_a:+.4f}",
            "delta %": f"{(ms_b - ms_a) / ms_a * 100:+.0f}%" if ms_a else "-",
            "significance": verdict,
            "_impact": str(abs(ms_b - ms_a)),
        })  # fmt: skip
    rows.sort(key=lambda r: float(r.pop("_impact")), reverse=True)
    return rows
