"""Compare runs side by side, from MLflow alone: `python -m runner.compare`.

With no arguments it compares the latest sweep of the default experiment. The table has
one row per run (failed runs included, as failed, and compared with nothing); with exactly
two runs it also prints the per-op diff, when both finished. At the end of every sweep the
same report is logged to the parent run. `--replay RUN` prints commands that run that run's
top ATen ops alone (`+workload=aten_op`). `--diff BEFORE AFTER` aligns the two runs' traces
span by span and logs the diff to the newer run. `--memory BEFORE AFTER` shows which allocation
sites account for the change in memory peak (runs with `measure.memory_snapshot=true`). They
refuse a run that did not finish.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run, RunTag
from mlflow.exceptions import MlflowException

from runner import names
from runner.config import ConfigError, TrackingConfig
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE, mann_whitney_p
from runner.report.curves import crossover_report, crossovers, size_curves, too_few_sizes
from runner.report.pairing import compare_times
from runner.report.reader import (
    Rounds,
    dollars_per_million_steps,
    find_sweep,
    is_reused,
    label,
    latest_sweep,
    logged_table,
    metric,
    op_table,
    per_op,
    price_per_hour,
    rounds,
    share_rounds,
    sweep_children,
    trace_files,
)
from runner.report.scaling import scaling_curves, scaling_report
from runner.secrets import redact
from runner.signals import skip_final_collections
from runner.tracking.links import comparison_links, describe_links, swept_columns, ui_for
from runner.tracking.store import check_usable, sqlite_path

# the same store and experiment a job logs to by default (tracking=local)
DEFAULT_EXPERIMENT = TrackingConfig.experiment
DEFAULT_URI = TrackingConfig.uri
FORMATS = ("table", "markdown", "csv", "json")
SPEEDUP = "speedup (95% CI)"
# which test the speedup comes from: paired by round, or unpaired
TEST = "test"
# a whole MLflow run id (uuid4 hex), as opposed to a prefix of one
WHOLE_RUN_ID = re.compile(r"[0-9a-f]{32}")


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


def find_run(client: MlflowClient, experiment_id: str, key: str, option: str = "--runs") -> Run:
    """A run by its id, or by an unambiguous prefix of it (as the MLflow UI shortens them)."""
    try:
        return client.get_run(key)
    except MlflowException:  # not a whole id: look for a prefix
        pass
    matches = [
        run.info.run_id
        for run in client.search_runs([experiment_id], max_results=50000)
        if run.info.run_id.startswith(key)
    ]
    if len(matches) > 1:
        raise SystemExit(f"error: {option} {key!r}: {len(matches)} runs in this experiment have an id starting so; "
                         "give more of it")  # fmt: skip
    if not matches:
        if WHOLE_RUN_ID.fullmatch(key):  # get_run looked in every experiment
            raise SystemExit(f"error: {option} {key!r}: no run has this id in this store")
        raise SystemExit(f"error: {option} {key!r}: no run in this experiment has an id starting so")
    return client.get_run(matches[0])


def not_compared(runs: list[Run]) -> str | None:
    """Why these runs' ops or traces are not compared: the first run that did not finish; None when all did."""
    unfinished = next((run for run in runs if run.info.status != JobStatus.FINISHED), None)
    return None if unfinished is None else f"not compared: run {label(unfinished)} {unfinished.info.status}"


def require_finished(run: Run, option: str, refusal: str) -> None:
    """Exit in one line for a run that did not finish: its ops and trace are not a finished run's."""
    if run.info.status != JobStatus.FINISHED:
        raise SystemExit(f"error: {option} {run.info.run_id}: {refusal}: run {run.info.status}")


def require_op_table(client: MlflowClient, run: Run) -> None:
    """Exit in one line, naming the run, when its op table is gone from its artifacts: every op would read as gone.

    A finished job always logs one (empty without the profiler).
    """
    if names.OP_TABLE_FILE not in {info.path for info in client.list_artifacts(run.info.run_id)}:
        raise SystemExit(
            f"error: run {run.info.run_id} ({label(run)}): its op table {names.OP_TABLE_FILE} is missing from its "
            "artifacts (were they deleted?); its ops cannot be read"
        )


def pick_baseline(runs: list[Run], key: str | None) -> Run | None:
    """--baseline as a run id or a workload name; by default the first run."""
    if key is None:
        return runs[0] if runs else None
    for run in runs:
        if key in (run.info.run_id, run.data.tags.get(names.TAG_WORKLOAD), label(run)):
            return run
    raise SystemExit(f"error: --baseline {key!r} matches no compared run (give a run id or a workload name)")


def report_sweep(client: MlflowClient, parent: Run, plots_dir: Path) -> str:
    """Log the comparison of a sweep's jobs to its parent run; return the terminal table and UI links.

    The parent gets `comparison.json` (an MLflow table), `comparison.md`, `plots/*.png` and the
    links as tags; each job gets its speedup and baseline as tags, for the runs table's columns
    (a job that a later sweep reuses carries that sweep's).
    """
    runs = sweep_children(client, parent.info.experiment_id, parent)
    if not runs:
        return "no job runs to compare"
    baseline = runs[0]  # as pick_baseline chooses without --baseline
    rows = comparison_rows(client, runs, baseline, parent)
    run_id = parent.info.run_id
    client.log_table(run_id, data={h: [row[h] for row in rows] for h in rows[0]}, artifact_file=names.COMPARISON_FILE)
    client.log_text(run_id, render(rows, "markdown") + "\n", names.COMPARISON_TEXT_FILE)
    for row in rows:
        speedup_tags = {names.TAG_COMPARE_SPEEDUP: row[SPEEDUP], names.TAG_COMPARE_BASELINE: label(baseline)}
        client.log_batch(row["run id"], tags=[RunTag(k, v) for k, v in speedup_tags.items()])
    from runner.report.plots import write_plots

    curves = size_curves(runs)
    found = crossovers(client, curves) if curves else []
    for path in write_plots(client, runs, plots_dir, found):
        client.log_artifact(run_id, str(path), names.PLOTS_FOLDER)
    table = render(rows, "table")
    if curves:
        report = crossover_report(found, curves)
        client.log_text(run_id, report + "\n", names.CROSSOVERS_FILE)
        table += "\n\n" + report
    elif note := too_few_sizes(runs):
        table += "\n\n" + note
    if scaling := scaling_curves(runs):
        report = scaling_report(scaling)
        client.log_text(run_id, report + "\n", names.SCALING_FILE)
        table += "\n\n" + report
    return table + "\n\n" + ui_links(client, runs, parent)


def ui_links(client: MlflowClient, runs: list[Run], parent: Run | None) -> str:
    """Links to the runs in MLflow's runs table (a sweep's swept keys first) and compare view.

    They are tagged on the sweep's parent, if any.
    """
    ui = ui_for(client.tracking_uri)
    swept = parent.data.tags.get(names.TAG_SWEPT_KEYS, "").split(",") if parent is not None else []
    first = swept_columns([key for key in swept if key], runs)
    links = comparison_links(ui, client, runs, first)
    if parent is not None:
        client.log_batch(parent.info.run_id, tags=[RunTag(key, link) for key, link in links.items()])
    return describe_links(ui, links)


def add_selection_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which store, experiment and runs (shared with runner.gate)."""
    parser.add_argument("--sweep", help="sweep parent run id or name (default: the latest sweep)")
    parser.add_argument("--runs", nargs="+", metavar="ID", help="compare these runs instead of a sweep")
    add_store_arguments(parser)


def add_store_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that say which store and experiment (shared with runner.history)."""
    parser.add_argument(
        "--uri",
        default=os.environ.get("MLFLOW_TRACKING_URI", DEFAULT_URI),
        help=f"MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else {DEFAULT_URI})",
    )
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="MLflow experiment (default: runner)")


def open_experiment(args: argparse.Namespace) -> tuple[MlflowClient, str]:
    """The store's client and the experiment's id; a one-line exit when either is missing."""
    path = sqlite_path(args.uri)
    if path is not None and not path.is_file():
        raise SystemExit(f"error: --uri {redact(args.uri)}: no MLflow store there (run a job first, or pass --uri)")
    try:
        check_usable(args.uri)  # a missing driver or an unreachable server, in one line
    except ConfigError as err:
        raise SystemExit(f"error: {str(err).replace('tracking.uri=', '--uri ', 1)}") from None
    client = MlflowClient(args.uri)
    experiment = client.get_experiment_by_name(args.experiment)
    if experiment is None:
        raise SystemExit(f"error: --experiment {args.experiment!r} does not exist in this tracking store")
    return client, experiment.experiment_id


def selected_runs(client: MlflowClient, experiment_id: str, args: argparse.Namespace) -> tuple[list[Run], Run | None]:
    """The runs --runs names, or the jobs of --sweep (default: the latest), with the sweep's parent."""
    if args.runs:
        return [find_run(client, experiment_id, key) for key in args.runs], None
    parent = find_sweep(client, experiment_id, args.sweep) if args.sweep else latest_sweep(client, experiment_id)
    return sweep_children(client, experiment_id, parent), parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(prog="python -m runner.compare", description=__doc__.splitlines()[0])
    add_selection_arguments(parser)
    parser.add_argument("--baseline", help="run id or workload name for speedups (default: the first run)")
    parser.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    parser.add_argument("--plots", metavar="DIR", help="also write the PNG plots into DIR")
    parser.add_argument("--replay", metavar="RUN", help="print commands that run this run's top ATen ops alone")
    parser.add_argument("--top", type=int, default=3, help="how many ops --replay covers (default: 3)")
    parser.add_argument(
        "--diff", nargs=2, metavar=("BEFORE", "AFTER"), help="align two runs' traces and show what changed, where"
    )
    parser.add_argument(
        "--memory",
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="which allocation sites account for the change in memory peak (runs with measure.memory_snapshot=true)",
    )
    parser.add_argument("--depth", type=int, default=3, help="levels below the step --diff prints (default: 3)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error(f"--top must be >= 1, got {args.top}")
    if args.depth < 0:
        parser.error(f"--depth must be >= 0, got {args.depth}")
    return args


def print_replays(client: MlflowClient, run: Run, top: int, output_format: str) -> int:
    """`--replay`: the commands that run the run's top ops alone."""
    from runner.report.replay import render_replays, top_replays

    require_finished(run, "--replay", "not replayed")
    require_op_table(client, run)
    replays, clock = top_replays(client, run, top)
    if not replays:
        raise SystemExit(f"error: --replay {run.info.run_id}: the run has no ATen ops in its op table")
    if output_format == "json":
        print(json.dumps([asdict(r) for r in replays], indent=2))
    else:
        print(render_replays(run, replays, clock))
    return 0


def print_trace_diff(client: MlflowClient, experiment_id: str, keys: list[str], depth: int, output_format: str) -> int:
    """`--diff`: the aligned tree on stdout; diff.md, diff.json and perfetto.json logged to the newer run."""
    from runner.measure.traces import load_profile
    from runner.report import trace_diff

    runs = [find_run(client, experiment_id, key, "--diff") for key in keys]
    for run in runs:
        require_finished(run, "--diff", "not compared")
    with tempfile.TemporaryDirectory() as scratch:
        profiles = []
        for number, run in enumerate(runs):
            paths = trace_files(client, run, Path(scratch) / str(number))
            if not paths:
                raise SystemExit(
                    f"error: --diff {run.info.run_id}: the run has no profiler trace among its artifacts "
                    "(profiler.enabled=false, or the trace stayed local: see its artifacts_kept_local.json)"
                )
            try:
                profiles.append(load_profile(paths))
            except ValueError as err:
                raise SystemExit(f"error: --diff {run.info.run_id}: {err}") from None
    before, after = profiles
    root = trace_diff.diff_profiles(before, after)
    run_names = (f"before: {label(runs[0])}", f"after: {label(runs[1])}")
    tree = trace_diff.render_tree(root, depth)
    legend = trace_diff.legend(label(runs[0]), label(runs[1]), before, after)
    newer = max(runs, key=lambda run: run.info.start_time).info.run_id
    folder = f"{names.TRACE_DIFF_FOLDER}/{runs[0].info.run_id[:8]}_to_{runs[1].info.run_id[:8]}"
    documents = {
        names.DIFF_TEXT_FILE: trace_diff.diff_document(legend, trace_diff.render_tree(root, depth=len(root.walk()))),
        names.DIFF_FILE: trace_diff.to_json_text(root),
        names.DIFF_PERFETTO_FILE: json.dumps(trace_diff.perfetto_trace(root, before, after, run_names)),
    }
    with tempfile.TemporaryDirectory() as scratch:  # written whole first, then logged in one call
        for name, text in documents.items():
            (Path(scratch) / name).write_text(text)
        client.log_artifacts(newer, scratch, folder)
    if output_format == "json":
        print(documents[names.DIFF_FILE])
    else:
        print(f"{legend}\n\n{tree}")
    print(
        f"\nlogged to run {newer}: {folder}/diff.md, diff.json and perfetto.json "
        "(open perfetto.json at https://ui.perfetto.dev)",
        file=sys.stderr,
    )
    return 0


def print_memory_diff(client: MlflowClient, experiment_id: str, keys: list[str], output_format: str) -> int:
    """`--memory`: the sites live at each run's peak, the largest change first, and the change in peak."""
    from runner.report.memory_diff import change_rows, readable_bytes, signed_bytes, site_changes, sites_of

    runs = [find_run(client, experiment_id, key, "--memory") for key in keys]
    peaks = []
    for run in runs:
        require_finished(run, "--memory", "not compared")
        table = logged_table(client, run, names.MEMORY_SITES_FILE)
        if table is None:
            raise SystemExit(
                f"error: --memory {run.info.run_id}: the run has no {names.MEMORY_SITES_FILE} "
                "(run it with measure.memory_snapshot=true)"
            )
        peaks.append(sites_of(table))
    changes = site_changes(*peaks)
    before, after = (sum(sites.values()) for sites in peaks)
    sources = [str(run.data.tags.get(names.TAG_MEMORY_SOURCE)) for run in runs]
    if output_format == "json":
        document = {
            "before": {"run": runs[0].info.run_id, "peak_bytes": before, "source": sources[0]},
            "after": {"run": runs[1].info.run_id, "peak_bytes": after, "source": sources[1]},
            "change_bytes": after - before,
            "sites": [{**asdict(c), "change": c.change} for c in changes],
        }
        print(json.dumps(document, indent=2))
        return 0
    if output_format == "csv":  # the rows alone, for other programs
        print(render(change_rows(changes), output_format))
        return 0
    print(f"memory peak by allocation site: {label(runs[0])} -> {label(runs[1])}\n")
    print(render(change_rows(changes), output_format))
    print(f"\ntotal: peak {readable_bytes(before)} -> {readable_bytes(after)} ({signed_bytes(after - before)})")
    if sources[0] != sources[1]:
        print(f"note: the peaks come from different sources ({sources[0]}; {sources[1]}): their sites differ in kind")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Print the comparison (and, for two runs, the per-op diff)."""
    args = parse_args(argv)
    client, experiment_id = open_experiment(args)
    if args.replay:
        return print_replays(client, find_run(client, experiment_id, args.replay, "--replay"), args.top, args.format)
    if args.diff:
        return print_trace_diff(client, experiment_id, args.diff, args.depth, args.format)
    if args.memory:
        return print_memory_diff(client, experiment_id, args.memory, args.format)
    runs, parent = selected_runs(client, experiment_id, args)
    baseline = pick_baseline(runs, args.baseline)
    rows = comparison_rows(client, runs, baseline, parent)
    two = len(runs) == 2
    unfinished = not_compared(runs) if two else None
    diff = op_diff(client, runs[0], runs[1]) if two and unfinished is None else None
    if args.format == "json":  # one document: the runs, and the per-op diff of two (or why there is none)
        document = {"runs": rows, "op_diff": diff, **({"op_diff_note": unfinished} if unfinished else {})}
        print(json.dumps(document if two else rows, indent=2))
    else:
        print(render(rows, args.format))
    if diff is not None and args.format != "json":
        print(f"\nper-op diff: {label(runs[0])} -> {label(runs[1])}\n")
        print(render(diff, args.format))
    elif unfinished is not None and args.format != "json":
        print(f"\nper-op diff: {unfinished}")
    if args.format == "table":  # the other formats are data for other programs
        print(f"\n{ui_links(client, runs, parent)}")
    if args.plots:
        from runner.report.plots import write_plots

        for path in write_plots(client, runs, args.plots):
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    skip_final_collections()
    sys.exit(main())
