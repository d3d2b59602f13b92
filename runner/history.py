"""Performance over time: `python -m runner.history`, each configuration's series of a metric and where it stepped.

Per configuration (config hash), the FINISHED job runs' values of a metric in time order, or in the
order of the commits HEAD descends from (`--order commit`; runs of other commits are left out, and
counted), with change points from `runner.report.change_points`. Runs flagged timing.stable=false
are drawn hollow and left out of the change points unless --include-unstable. The report and a plot
per configuration are logged to a run of their own (runner.kind=history).

Exit status: 0; 1 a regression past --fail-on-regression (with it too: a newest run whose output is not
finite unless the run before's was not either, whose accuracy check failed, or whose device memory peak
grew past it); 2 the store, experiment, configuration, sweep or checkout not found, or no run with the
metric; 3 --fail-on-regression judged nothing: no configuration has enough runs its change points can
use (unstable runs are left out). Each said in one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import CONF_DIR, names
from runner.job import JobStatus
from runner.report.change_points import MAX_P, MIN_POINTS
from runner.report.checks import checks, logged
from runner.report.reader import find_sweep, sweep_children
from runner.report.selection import add_store_arguments, open_experiment
from runner.report.series import Series, Step, by_configuration, find_steps, in_order, job_runs, point, worse_by
from runner.report.table import render
from runner.signals import skip_final_collections
from runner.tracking.links import run_page, ui_for
from runner.tracking.worktree import NoCheckout, commits_oldest_first

REGRESSION_EXIT, NOT_FOUND_EXIT, NOT_JUDGED_EXIT = 1, 2, 3


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(
        prog="python -m runner.history", description=__doc__.splitlines()[0], epilog=__doc__[__doc__.index("Exit") :]
    )
    add_store_arguments(parser)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--config", metavar="HASH", help="one configuration: its runner.config_hash, or a prefix")
    which.add_argument("--sweep", metavar="RUN", help="the configurations of a sweep's jobs (parent run id or name)")
    add = parser.add_argument
    add("--metric", default=names.STEP_MEDIAN_MS, help=f"metric to follow (default: {names.STEP_MEDIAN_MS})")
    add("--order", choices=("time", "commit"), default="time", help="runs by start time, or by commit (default: time)")
    add("--repo", type=Path, default=CONF_DIR.parent, help="with --order commit: the checkout whose history orders "
        "the commits (default: this project's)")  # fmt: skip
    add("--include-unstable", action="store_true", help="find change points on runs flagged timing.stable=false too")
    add("--fail-on-regression", type=float, metavar="PCT", help="exit 1 when a configuration's newest segment is "
        "worse than the one before by more than PCT percent")  # fmt: skip
    add("--format", choices=("table", "markdown", "json"), default="table", help="output format (default: table)")
    add("--out", type=Path, help="also write history.md, history.json and the plots into this folder")
    args = parser.parse_args(argv)
    if args.fail_on_regression is not None and args.fail_on_regression < 0:
        parser.error(f"--fail-on-regression {args.fail_on_regression:g}: give a percentage >= 0")
    return args


def selected_runs(client: MlflowClient, experiment_id: str, args: argparse.Namespace) -> list[Run]:
    """The job runs that logged the metric, of the configuration or sweep asked for (all by default)."""
    runs = job_runs(client, experiment_id, args.metric)
    hash_of = names.TAG_CONFIG_HASH
    if args.sweep:
        jobs = sweep_children(client, experiment_id, find_sweep(client, experiment_id, args.sweep))
        hashes = {job.data.tags.get(hash_of) for job in jobs}
        runs = [run for run in runs if run.data.tags[hash_of] in hashes]
    if args.config:
        runs = [run for run in runs if run.data.tags[hash_of].startswith(args.config)]
        matched = sorted({run.data.tags[hash_of] for run in runs})
        if len(matched) > 1:
            raise SystemExit(f"error: --config {args.config!r}: {len(matched)} configurations have a hash starting so "
                             f"({', '.join(matched[:3])}, ...); give more of it")  # fmt: skip
    if not runs:
        chosen = f" of --config {args.config}" if args.config else f" of --sweep {args.sweep}" if args.sweep else ""
        raise SystemExit(f"error: no {JobStatus.FINISHED} job run{chosen} in --experiment {args.experiment!r} "
                         f"logged --metric {args.metric}")  # fmt: skip
    return runs


def histories(client: MlflowClient, experiment_id: str, args: argparse.Namespace) -> tuple[list[Series], int]:
    """Each configuration's series with its change points, and how many runs commit order left out."""
    commits = None
    if args.order == "commit":
        try:
            commits = commits_oldest_first(args.repo)
        except NoCheckout as err:
            raise SystemExit(f"error: {err} (give --repo, or --order time)") from None
    found, outside = [], 0
    for config_hash, runs in by_configuration(selected_runs(client, experiment_id, args)).items():
        points, left = in_order([point(client, run, args.metric) for run in runs], commits)
        outside += left
        if points:
            series = Series(config_hash, points[-1].name, points)
            find_steps(series, args.include_unstable)
            found.append(series)
    return sorted(found, key=lambda s: s.label), outside


def _fmt(value: float) -> str:
    return f"{value:.4g}"


def _between(step: Step) -> str:
    return f"{step.before.commit[:8]} -> {step.after.commit[:8]}"


def summary_rows(found: list[Series]) -> list[dict[str, str]]:
    """One row per configuration: its runs, those left out of the change points, its newest value and steps."""
    return [
        {
            "configuration": series.label,
            "config hash": series.config_hash,
            "runs": str(len(series.points)),
            "left out": ", ".join(f"{len(runs)} {why}" for why, runs in series.left_out.items()) or "-",
            "newest": _fmt(series.points[-1].value),
            "change points": "; ".join(f"{_between(s)}: {s.change.change:+.1%}" for s in series.steps) or "none",
        }
        for series in found
    ]


def _step_rows(found: list[Series]) -> list[dict[str, str]]:
    """One row per change point: the commits and runs either side, the levels, the change and its p."""
    return [
        {
            "configuration": series.label,
            "commits": _between(step),
            "runs": f"{step.before.run_id[:8]} -> {step.after.run_id[:8]}",
            "before": _fmt(step.change.before),
            "after": _fmt(step.change.after),
            "change": f"{step.change.change:+.1%}",
            "p": f"{step.change.p_value:.2g}",
        }
        for series in found
        for step in series.steps
    ]


def regressions(found: list[Series], key: str, percent: float | None) -> list[str]:
    """A line per configuration whose newest segment is worse than the one before by more than `percent`."""
    if percent is None:
        return []
    lines = []
    for series in found:
        if series.steps and worse_by(series.steps[-1], key) > percent / 100:
            step = series.steps[-1]
            lines.append(f"history: REGRESSION: {series.label} ({series.config_hash[:8]}): the newest segment "
                         f"({step.after.commit[:8]} on) is {step.change.change:+.1%} in {key} against the one before, "
                         f"past {percent:g}%")  # fmt: skip
    return lines


def _newest_checks(client: MlflowClient, found: list[Series], percent: float | None) -> tuple[list[str], list[str]]:
    """Each configuration's newest run against the run before it, besides the metric: its lines, and those that fail.

    What a run logs of its output, accuracy, first call and memory peak (`runner.report.checks`), the device's peak
    judged against `percent`; a configuration of one run has its output and accuracy checked alone.
    """
    if percent is None:
        return [], []
    lines: list[str] = []
    failing: list[str] = []
    for series in found:
        newest = client.get_run(series.points[-1].run_id)
        before = client.get_run(series.points[-2].run_id) if len(series.points) > 1 else None
        for check in checks(logged(before), logged(newest), percent / 100):
            said = f"{series.label} ({series.config_hash[:8]}): the newest run ({series.points[-1].commit[:8]}) "
            said += f"against the one before: {check.text}"
            (failing if check.failed else lines).append(f"history: {'REGRESSION: ' if check.failed else ''}{said}")
    return lines, failing


def not_judged(found: list[Series], percent: float | None) -> str | None:
    """Why --fail-on-regression judged nothing: no configuration has the runs a change point needs."""
    if percent is None or any(len(series.used) >= MIN_POINTS for series in found):
        return None
    unstable = sum(len(series.left_out.get("timing unstable", [])) for series in found)
    why = f" ({unstable} flagged timing.stable=false: --include-unstable takes them in)" if unstable else ""
    return f"history: not judged: no configuration has {MIN_POINTS} runs its change points can use{why}"


def notes(found: list[Series], outside: int, args: argparse.Namespace) -> list[str]:
    """What was left out of the series and of the change points, and how the change points were found."""
    lines = [f"change points: PELT (ruptures) on the log values, each kept at Welch p <= {MAX_P:g}"]
    if unstable := sum(len(series.left_out.get("timing unstable", [])) for series in found):
        lines.append(f"left out of the change points: {unstable} run(s) flagged timing.stable=false (drawn hollow; "
                     "--include-unstable takes them in)")  # fmt: skip
    elif args.include_unstable:
        lines.append("runs flagged timing.stable=false are in the change points (--include-unstable)")
    if positive := sum(len(series.left_out.get("not positive", [])) for series in found):
        lines.append(f"left out of the change points: {positive} run(s) whose value is not positive")
    if outside:
        lines.append(f"left out of the series: {outside} run(s) whose commit HEAD of {args.repo} does not descend from")
    return lines


def document(found: list[Series], args: argparse.Namespace, notes_: list[str], failed: list[str]) -> dict[str, Any]:
    """The JSON report: every configuration's points and change points, the notes and the regressions."""
    return {
        "metric": args.metric,
        "order": args.order,
        "notes": notes_,
        "regressions": failed,
        "configurations": [
            {
                "configuration": series.label,
                "config_hash": series.config_hash,
                "left_out": series.left_out,
                "points": [
                    {**vars(p), "interval": list(p.interval) if p.interval else None, "used": k in series.used}
                    for k, p in enumerate(series.points)
                ],
                "change_points": [
                    {
                        "before_commit": step.before.commit,
                        "after_commit": step.after.commit,
                        "before_run": step.before.run_id,
                        "after_run": step.after.run_id,
                        "before": step.change.before,
                        "after": step.change.after,
                        "change": step.change.change,
                        "p_value": step.change.p_value,
                    }
                    for step in series.steps
                ],
            }
            for series in found
        ],
    }


def markdown(found: list[Series], args: argparse.Namespace, notes_: list[str], failed: list[str]) -> str:
    """The Markdown report: the notes, a table of the configurations and one of the change points, the plots."""
    lines = [f"# History of {args.metric}", "", f"In {args.order} order, oldest first.", ""]
    lines += [f"- {line}" for line in [*notes_, *failed]] + ["", render(summary_rows(found), "markdown"), ""]
    if steps := _step_rows(found):
        lines += ["## Change points", "", render(steps, "markdown"), ""]
    left_out = [(series, why, run_id) for series in found for why, runs in series.left_out.items() for run_id in runs]
    if left_out:
        lines += ["## Runs left out of the change points", ""]
        lines += [f"- {series.label}: run {run_id} ({why})" for series, why, run_id in left_out] + [""]
    lines += ["## Plots", ""]
    for series in found:
        plot = f"{names.PLOTS_FOLDER}/{names.HISTORY_PLOT_FILE.format(config_hash=series.config_hash)}"
        lines += [f"![{series.label}]({plot})", ""]
    return "\n".join(lines)


def _write_report(
    found: list[Series], args: argparse.Namespace, notes_: list[str], failed: list[str], out: Path
) -> None:
    """history.md, history.json and plots/history_<hash>.png in `out`."""
    from runner.report.plots import history_figure, save

    out.mkdir(parents=True, exist_ok=True)
    (out / names.HISTORY_TEXT_FILE).write_text(markdown(found, args, notes_, failed))
    (out / names.HISTORY_FILE).write_text(json.dumps(document(found, args, notes_, failed), indent=2))
    for series in found:
        plot = names.HISTORY_PLOT_FILE.format(config_hash=series.config_hash)
        save(history_figure(series, args.metric), out / names.PLOTS_FOLDER / plot)


def log_report(client: MlflowClient, experiment_id: str, args: argparse.Namespace, folder: Path) -> str:
    """A run of kind `history` holding the report's files; its page in the MLflow UI."""
    tags = {names.TAG_KIND: names.KIND_HISTORY, names.TAG_HISTORY_METRIC: args.metric}
    run = client.create_run(experiment_id, run_name=f"history {args.metric}", tags=tags)
    for name in (names.HISTORY_TEXT_FILE, names.HISTORY_FILE):
        client.log_artifact(run.info.run_id, str(folder / name))
    client.log_artifacts(run.info.run_id, str(folder / names.PLOTS_FOLDER), names.PLOTS_FOLDER)
    client.set_terminated(run.info.run_id, JobStatus.FINISHED)
    return run_page(ui_for(client.tracking_uri), experiment_id, run.info.run_id)


def main(argv: list[str] | None = None) -> int:
    """Print each configuration's history and its change points; exit 1 on a regression, 3 when none was judged."""
    args = parse_args(argv)
    try:
        client, experiment_id = open_experiment(args)
        found, outside = histories(client, experiment_id, args)
    except SystemExit as missing:
        print(missing, file=sys.stderr)
        return NOT_FOUND_EXIT
    checked, wrong = _newest_checks(client, found, args.fail_on_regression)
    notes_ = notes(found, outside, args) + checked
    failed = regressions(found, args.metric, args.fail_on_regression) + wrong
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.out or Path(scratch)
        _write_report(found, args, notes_, failed, folder)
        link = log_report(client, experiment_id, args, folder)
    if args.format == "json":
        print(json.dumps(document(found, args, notes_, failed), indent=2))
    else:
        print(render(summary_rows(found), args.format))
        if steps := _step_rows(found):
            print(f"\nchange points:\n{render(steps, args.format)}")
        print("\n" + "\n".join([*notes_, f"plots and report (history.md, history.json): {link}", *failed]))
    if not failed and (why := not_judged(found, args.fail_on_regression)):
        print(why, file=sys.stderr)
        return NOT_JUDGED_EXIT
    return REGRESSION_EXIT if failed else 0


if __name__ == "__main__":
    skip_final_collections()
    sys.exit(main())
