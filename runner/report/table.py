"""The comparison as a table: one row per run with its speedup against a baseline, the per-op diff of two, rendered.

A sweep's end logs it to its parent run (`runner.report.sweep_report`); `python -m runner.compare`
prints it, and the gate and the history render their own rows with `render`.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE, mann_whitney_p
from runner.report.pairing import compare_times
from runner.report.reader import (
    Rounds,
    dollars_per_million_steps,
    is_reused,
    label,
    metric,
    op_table,
    per_op,
    price_per_hour,
    rounds,
    share_rounds,
)
from runner.report.selection import require_op_table

FORMATS = ("table", "markdown", "csv", "json")
SPEEDUP = "speedup (95% CI)"
# which test the speedup comes from: paired by round, or unpaired
TEST = "test"


def _fmt(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _median(run: Run) -> str:
    median, iqr = metric(run, names.STEP_MEDIAN_MS), metric(run, names.STEP_IQR_MS)
    return "-" if median is None else f"{median:.4f} ± {iqr or 0:.4f}"


def _device_per_step(run: Run) -> float | None:
    total, steps = metric(run, names.DEVICE_SELF_TOTAL_MS), metric(run, names.PROFILER_ACTIVE_STEPS)
    return total / steps if total is not None and steps else None


def _lowering(run: Run) -> str:
    kernels = metric(run, names.OPS_DEVICE_KERNELS)
    neffs = metric(run, names.NEURON_NEFF_FILES)
    parts = [f"{_fmt(metric(run, names.OPS_ATEN), 0)} aten"]
    if kernels is not None:
        parts.append(f"{kernels:.0f} kernels")
    if neffs is not None:
        parts.append(f"{neffs:.0f} NEFFs")
    return ", ".join(parts)


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
    price = price_per_hour(run)
    median = metric(run, names.STEP_MEDIAN_MS)
    if price is None or median is None:
        return "-"
    return f"${dollars_per_million_steps(price, median):.4f}"


@dataclass
class Column:
    """One column of the comparison: its header and how to read it off a run."""

    header: str
    value: Callable[[Run], Any]


COLUMNS = [
    Column("run", label),
    Column("status", lambda r: r.info.status),
    Column(
        "backend", lambda r: f"{r.data.tags.get(names.TAG_BACKEND, '-')} ({r.data.tags.get(names.TAG_DEVICE, '-')})"
    ),
    Column("median ms ± IQR", _median),
    Column("stable", lambda r: {"true": "yes", "false": "NO"}.get(r.data.tags.get(names.TAG_TIMING_STABLE, ""), "-")),
    Column("device ms/step", lambda r: _fmt(_device_per_step(r), 4)),
    Column("lowering", _lowering),
    Column("top op", lambda r: _short(r.data.tags.get(names.TAG_TOP_OP, "-"))),
    Column("first call s", lambda r: _fmt(metric(r, names.FIRST_CALL_S))),
    Column("graphs", lambda r: _fmt(metric(r, names.COMPILE_GRAPHS), 0)),
    Column("peak MB", _memory),
    Column("GB/s", lambda r: _fmt(metric(r, names.ROOFLINE_ACHIEVED_GBPS), 2)),
    Column("roofline", lambda r: _fmt(_percent(metric(r, names.ROOFLINE_BANDWIDTH_FRACTION)), 1, "%")),
    Column("accuracy", lambda r: r.data.tags.get(names.TAG_ACCURACY, "-")),
    Column("overhead", lambda r: _fmt(metric(r, names.PROFILER_OVERHEAD_PCT), 1, "%")),
    Column("ranks", _ranks),
    Column("busbw GB/s", lambda r: _fmt(metric(r, names.COLLECTIVE_BUSBW_GBPS), 3)),
    Column("of link", lambda r: _fmt(_percent(metric(r, names.COLLECTIVE_BUSBW_LINK_FRACTION)), 1, "%")),
    Column("$/1M steps", _cost),
]


def _short(text: str, width: int = 32) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _percent(fraction: float | None) -> float | None:
    return None if fraction is None else fraction * 100


def speedup(run: Run, baseline: Run | None, samples: dict[str, Rounds]) -> tuple[str, str]:
    """The baseline's step time over the run's, with its 95% interval, or why there is none; and its test.

    A speedup is printed only with an interval that excludes no change, and never between
    unpaired runs whose timing is unstable: a bare ratio of two medians can be a mode flip.
    Runs that share rounds are compared round by round (`runner.report.pairing`), unstable or
    not: a slow stretch that made a round disagree fell on both runs and cancels in its ratio,
    and the row says the timing was unstable.
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
    estimate = comparison.estimate
    if estimate is None:
        need = "2 rounds in common" if paired else "measure.processes >= 2 in both runs"
        return f"not compared: needs {need}", comparison.test
    interval = f"[{1 / estimate.high:.2f}, {1 / estimate.low:.2f}]"
    note = " (timing unstable)" if unstable else ""
    if not estimate.significant:
        return f"no significant difference {interval}{note}", comparison.test
    return f"{1 / estimate.ratio:.2f}x {interval}{note}", comparison.test


def comparison_rows(
    client: MlflowClient, runs: list[Run], baseline: Run | None, parent: Run | None = None
) -> list[dict[str, str]]:
    """One row per run: its rank by median (1 = fastest) and its speedup against `baseline`.

    With the sweep's `parent`, runs the sweep reused instead of running are marked so.
    """
    samples = {run.info.run_id: rounds(client, run) for run in runs}
    medians = sorted(m for m in (metric(r, names.STEP_MEDIAN_MS) for r in runs) if m is not None)
    rows = []
    for run in runs:
        median = metric(run, names.STEP_MEDIAN_MS)
        row = {"rank": str(medians.index(median) + 1) if median is not None else "-"}
        row.update({c.header: str(c.value(run)) for c in COLUMNS})
        if is_reused(run, parent):
            row["status"] += " (reused)"
        row[SPEEDUP], row[TEST] = speedup(run, baseline, samples)
        row["run id"] = run.info.run_id
        rows.append(row)
    return rows


def render(rows: list[dict[str, str]], fmt: str) -> str:
    """The rows as an aligned table, markdown, CSV or JSON."""
    if fmt == "json":
        return json.dumps(rows, indent=2)
    headers = list(rows[0]) if rows else [c.header for c in COLUMNS]
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
    return "\n".join(lines)


def op_diff(client: MlflowClient, a: Run, b: Run) -> list[dict[str, str]]:
    """Per-op differences from run a to run b, largest change in self time first.

    Ops that appear or disappear are marked; where both runs have per-cycle samples
    (schedule.repeat > 1) a Mann-Whitney U test says whether the change is significant.
    """
    for run in (a, b):
        require_op_table(client, run)
    ops_a = per_op(op_table(client, a), metric(a, names.PROFILER_ACTIVE_STEPS) or 1)
    ops_b = per_op(op_table(client, b), metric(b, names.PROFILER_ACTIVE_STEPS) or 1)
    rows = []
    for name in ops_a.keys() | ops_b.keys():
        before, after = ops_a.get(name), ops_b.get(name)
        change = "gone" if after is None else "new" if before is None else ""
        ms_a = before.self_ms_per_step if before else 0.0
        ms_b = after.self_ms_per_step if after else 0.0
        if before and after and before.cycle_samples and after.cycle_samples:
            p = mann_whitney_p(before.cycle_samples, after.cycle_samples)
            verdict = f"{'significant' if p < SIGNIFICANCE else 'n.s.'} (p={p:.3f})"
        else:
            verdict = "n/a (needs schedule.repeat > 1 in both runs)" if before and after else "-"
        rows.append({
            "op": name,
            "change": change,
            "calls/step": f"{before.calls_per_step if before else 0:g} -> {after.calls_per_step if after else 0:g}",
            "self ms/step": f"{ms_a:.4f} -> {ms_b:.4f}",
            "delta ms": f"{ms_b - ms_a:+.4f}",
            "delta %": f"{(ms_b - ms_a) / ms_a * 100:+.0f}%" if ms_a else "-",
            "significance": verdict,
            "_impact": str(abs(ms_b - ms_a)),
        })  # fmt: skip
    rows.sort(key=lambda r: float(r.pop("_impact")), reverse=True)
    return rows
