"""What the terminal shows at the end of a job."""

from __future__ import annotations

import re
from pathlib import Path

from runner import names
from runner.measure.optable import self_time_by_op
from runner.measure.result import JobResult
from runner.report.memory_diff import readable_bytes

TOP_OPS = 5
_PERFETTO_HINT = "open in https://ui.perfetto.dev or chrome://tracing"
# HolisticTraceAnalysis reads the trace files in the folder it is given, not in its subfolders, one file per rank
_HTA_HINT = "Holistic Trace Analysis reads its folder, not trace/"


def _in_step_order(path: Path) -> list[int | str]:
    """A path's sort key with its numbers compared as numbers: iteration_11 after iteration_3."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", str(path))]


def _trace(trace_dir: Path) -> str | None:
    """The trace line: the last cycle's trace and how to open it; None without a trace."""
    traces = sorted(trace_dir.rglob("*.json"), key=_in_step_order) if trace_dir.is_dir() else []
    if not traces:
        return None
    last, hints = traces[-1], [_PERFETTO_HINT]
    if last.name == names.TRACE_FILE:  # the profiler's own export, one per recorded cycle (the Neuron capture's differ)
        cycles = sum(trace.name == names.TRACE_FILE for trace in traces)
        hints += [f"the last of {cycles} cycles, a folder each"] if cycles > 1 else []
        hints.append(_HTA_HINT)
    return f"trace: {last}  ({'; '.join(hints)})"


def _collectives(m: dict[str, float], tags: dict[str, object]) -> str:
    """The ranks' collectives in a few words; what the step times alone say without traces."""
    if names.RANKS_COLLECTIVE_SHARE not in m:
        return "no trace, so no collective share or slowest rank (profiler=none)"
    overlap = m.get(names.RANKS_COLLECTIVE_OVERLAP)
    overlapped = f", {overlap:.0%} of their run time overlapped compute" if overlap is not None else ""
    return (
        f"compute per step slowest over fastest rank {m[names.RANKS_COMPUTE_SPREAD]:.2f}, slowest rank "
        f"{tags[names.TAG_SLOWEST_RANK]}; collectives {m[names.RANKS_COLLECTIVE_SHARE]:.0%} of the step{overlapped}"
    )


def _layers(m: dict[str, float], tags: dict[str, object], tables: dict[str, dict[str, list[object]]]) -> str:
    """measure.layer_accuracy in one line: how many layer outputs were compared, and the first over tolerance."""
    compared, failing = len(tables[names.LAYER_TABLE_FILE]["layer"]), int(m[names.LAYERS_FAILING])
    verdict = "none over tolerance"
    if failing:
        verdict = f"{failing} over tolerance; {tags[names.TAG_FIRST_FAILING_LAYER]} is the first layer over tolerance"
    compared_with = f"{compared} layer output(s) compared with float64 on the CPU"
    return f"layer accuracy: {compared_with}, {verdict} (see {names.LAYER_TABLE_FILE})"


def _rounds(rounds: dict[str, list[object]]) -> str:
    """How the steady state's worker processes ran: the job's own one after another, or interleaved with others'."""
    count, others = len(rounds["round"]), max(int(str(w)) for w in rounds["workers"]) - 1
    if not others:
        return f"rounds: {count}, one fresh worker process each, one after another"
    return (
        f"rounds: {count}, each one fresh worker of this job and of {others} other job(s) of the sweep in a "
        f"random order ({names.ROUNDS_FILE}): the sweep's variants pair round by round"
    )


def _memory(tags: dict[str, object], result: JobResult, folder: Path) -> str:
    """measure.memory_snapshot in one line: the window's peak, what it was read from, its largest site, the snapshot."""
    sites = result.tables[names.MEMORY_SITES_FILE]
    peak = sum(sites[names.MEMORY_SITE_BYTES])
    largest = (
        f"; largest site {sites[names.MEMORY_SITE][0]} ({sites[names.MEMORY_SITE_BYTES][0] / peak:.0%})" if peak else ""
    )
    snapshot = folder / names.MEMORY_SNAPSHOT_FILE
    return (
        f"memory: peak {readable_bytes(peak)} held by the profiled window's allocations, from "
        f"{tags[names.TAG_MEMORY_SOURCE]}"
        f"{largest} ({names.MEMORY_SITES_FILE}); snapshot: {snapshot}  (open in https://pytorch.org/memory_viz)"
    )


def _clock(tags: dict[str, object]) -> str:
    """What timed the steady state, where it is not the host's clock around each synchronized step."""
    clock, _, flushed = str(tags.get(names.TAG_STEP_CLOCK, names.STEP_CLOCK_HOST)).partition(", ")
    if clock == names.STEP_CLOCK_HOST:
        return ""
    return f" (by device events, steps back to back{'; ' + flushed if flushed else ''})"


def _synchronized_step(m: dict[str, float]) -> str:
    """Where device events timed the steady state: the synchronized step's wall time, and where it goes."""
    wall = m[names.SYNC_STEP_MS]
    if names.DEVICE_BUSY_MS not in m:
        return (
            f"synchronized step: {wall:.4f} ms wall, launch to completion (the device's busy share needs the profiler)"
        )
    busy, rest = m[names.DEVICE_BUSY_MS], m[names.HOST_AND_IDLE_MS]
    return (
        f"synchronized step: {wall:.4f} ms wall = {busy:.4f} ms device busy ({busy / wall:.0%}) + {rest:.4f} ms "
        f"launches, host Python and idle ({rest / wall:.0%})"
    )


def job_summary(run_name: str, placement: str, result: JobResult, where: str) -> str:
    """A short block: where it ran, headline numbers, the top ops, warnings, the trace and the run."""
    m, tags, table, trace_dir = result.metrics, result.tags, result.table, result.capture_dir
    uncertainty = m.get(names.STEP_MEDIAN_UNCERTAINTY_PCT)
    within = "" if uncertainty is None else f" (+-{uncertainty:.1f}%)"
    lines = [
        f"== {run_name} ==",
        f"ran on: {placement}",
        f"steady state{_clock(tags)}: median {m[names.STEP_MEDIAN_MS]:.4f} ms/step{within} over "
        f"{m[names.STEPS_TIMED]:.0f} steps "
        f"(p10 {m[names.STEP_P10_MS]:.4f}, "
        f"p90 {m[names.STEP_P90_MS]:.4f}, cv {m[names.STEP_CV]:.2f}); first call {m[names.FIRST_CALL_S]:.3f} s",
    ]
    if names.SYNC_STEP_MS in m:
        lines.append(_synchronized_step(m))
    if names.ROUNDS_FILE in result.tables:
        lines.append(_rounds(result.tables[names.ROUNDS_FILE]))
    if names.PROFILER_OVERHEAD_PCT in m:
        cost = (
            f"; the profiler's own cost {m[names.PROFILER_COST_MS]:.4f} ms/step" if names.PROFILER_COST_MS in m else ""
        )
        lines.append(
            f"profiled step: {m[names.PROFILER_STEP_MS]:.4f} ms "
            f"({m[names.PROFILER_OVERHEAD_PCT]:+.1f}% against the steady median{cost})"
        )
    if names.RANKS in m:
        lines.append(
            f"ranks: {m[names.RANKS]:.0f}, slowest median {m[names.RANKS_STEP_MEDIAN_MAX_MS]:.4f} ms/step "
            f"(straggler ratio {m[names.RANKS_STRAGGLER_RATIO]:.2f}); {_collectives(m, tags)} (numbers above: rank 0)"
        )
    if names.COLLECTIVE_BUSBW_GBPS in m:
        fraction = f" = {m[names.COLLECTIVE_BUSBW_LINK_FRACTION]:.1%}" if names.COLLECTIVE_LINK_GBPS in m else ""
        link = f"{fraction} [{tags.get(names.TAG_COLLECTIVE_LINK, 'link unknown')}]"
        lines.append(
            f"collective: algbw {m[names.COLLECTIVE_ALGBW_GBPS]:.3f} GB/s, "
            f"busbw {m[names.COLLECTIVE_BUSBW_GBPS]:.3f} GB/s{link}"
        )
    if names.TAG_ACCURACY in tags:
        lines.append(f"accuracy: {tags[names.TAG_ACCURACY]} ({tags.get(names.TAG_ACCURACY_DETAIL, '')})")
    if names.LAYERS_FAILING in m:
        lines.append(_layers(m, tags, result.tables))
    if names.ROOFLINE_ACHIEVED_GBPS in m:
        lines.append(
            f"roofline: {m[names.ROOFLINE_ACHIEVED_GBPS]:.2f} GB/s = {m[names.ROOFLINE_BANDWIDTH_FRACTION]:.1%} of "
            f"{m[names.ROOFLINE_PEAK_GBPS]:.1f} GB/s; {m[names.ROOFLINE_ACHIEVED_GFLOPS]:.2f} GFLOP/s = "
            f"{m[names.ROOFLINE_COMPUTE_FRACTION]:.1%} of {m[names.ROOFLINE_PEAK_GFLOPS]:.1f} GFLOP/s "
            f"[{tags[names.TAG_ROOFLINE_PEAK]}]"
        )
    if result.memory_dir is not None:
        lines.append(_memory(tags, result, result.memory_dir))
    by_op = self_time_by_op(table)
    total = sum(by_op.values()) or 1.0  # all zero: every share 0
    if by_op:
        clock = "device" if table.has_device_time else "CPU"
        lines.append(f"top ops by self {clock} time over {table.active_steps} active step(s):")
        lines += [f"  {ms:10.3f} ms  {ms / total:6.1%}  {name}" for name, ms in list(by_op.items())[:TOP_OPS]]
    if tags.get(names.TAG_WINDOW_REPRESENTATIVE) == "false":
        lines.append(f"profiled window not representative of the steady state: {tags[names.TAG_WINDOW_REASON]}")
    trace = _trace(trace_dir)
    if trace is not None:
        lines.append(trace)
    lines += [f"WARNING: {warning}" for warning in result.warnings]
    if result.timing_note:
        lines.append(f"NOTE: {result.timing_note}")
    lines.append(where)
    return "\n".join(lines)
