"""A sweep's comparison, logged to its parent run at the sweep's end, and the MLflow UI links to its runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Run, RunTag

from runner import names
from runner.report.curves import crossover_report, crossovers, size_curves, too_few_sizes
from runner.report.reader import label, sweep_children
from runner.report.scaling import scaling_curves, scaling_report
from runner.report.table import (
    NARROWING,
    SPEEDUP,
    STABLE,
    comparison_rows,
    render,
    unresolved,
    unresolved_note,
    without_empty_columns,
)
from runner.tracking.links import comparison_links, describe_links, swept_columns, ui_for


def report_sweep(client: MlflowClient, parent: Run, plots_dir: Path) -> str:
    """Log the comparison of a sweep's jobs to its parent run; return the terminal table and UI links.

    Each job gets its speedup and baseline as tags, for the runs table (a job a later sweep reuses gets that sweep's).
    A job whose speedup is not resolved is flagged `timing.stable=false`, with what would narrow it: the comparison
    asked for is the sweep's, so the flag is judged there (issue 52).
    """
    runs = sweep_children(client, parent.info.experiment_id, parent)
    if not runs:
        return "no job runs to compare"
    baseline = runs[0]  # as pick_baseline chooses without --baseline
    rows = comparison_rows(client, runs, baseline, parent)
    for row in rows:
        speedup_tags = {names.TAG_COMPARE_SPEEDUP: row[SPEEDUP], names.TAG_COMPARE_BASELINE: label(baseline)}
        if unresolved(row):
            why = f"its speedup over {label(baseline)} is not resolved: {row[SPEEDUP]}; {NARROWING}"
            speedup_tags |= {names.TAG_TIMING_STABLE: "false", names.TAG_TIMING_REASONS: why}
            row[STABLE] = "NO"  # the flag just set, in this sweep's own table too
        client.log_batch(row["run id"], tags=[RunTag(k, v) for k, v in speedup_tags.items()])
    run_id = parent.info.run_id
    client.log_table(run_id, data={h: [row[h] for row in rows] for h in rows[0]}, artifact_file=names.COMPARISON_FILE)
    shown = without_empty_columns(rows)  # comparison.json keeps every column
    client.log_text(run_id, render(shown, "markdown") + "\n", names.COMPARISON_TEXT_FILE)
    from runner.report.plots import write_plots

    curves = size_curves(runs)
    found = crossovers(client, curves) if curves else []
    for path in write_plots(client, runs, plots_dir, found):
        client.log_artifact(run_id, str(path), names.PLOTS_FOLDER)
    table = render(shown, "table")
    if note := unresolved_note(rows):
        table += "\n" + note
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


def _other_speedups(runs: list[Run], rows: list[dict[str, Any]]) -> str | None:
    """Why the runs' `compare.speedup` tags are not the speedups of `rows` (None: they are).

    The tags are the last sweep's comparison: against its baseline, which `compare --baseline` may not be.
    """
    tagged = {run.info.run_id: run.data.tags for run in runs}
    if all(tagged[row["run id"]].get(names.TAG_COMPARE_SPEEDUP) == row[SPEEDUP] for row in rows):
        return None
    baselines = sorted(
        {tags[names.TAG_COMPARE_BASELINE] for tags in tagged.values() if tags.get(names.TAG_COMPARE_BASELINE)}
    )
    carried = f"their last sweep's, against {', '.join(baselines)}" if baselines else "none"
    return (
        f"the runs table leaves out {names.TAG_COMPARE_SPEEDUP}: the runs carry other speedups ({carried}), not these"
    )


def ui_links(
    client: MlflowClient, runs: list[Run], parent: Run | None, rows: list[dict[str, Any]] | None = None
) -> str:
    """Links to the runs in MLflow's runs table (a sweep's swept keys first) and compare view, tagged on `parent`.

    With `rows` (a comparison whose speedups the runs' tags may not hold), the table shows the speedup column only
    where the tags are those rows' speedups, and the text says when it is left out.
    """
    ui = ui_for(client.tracking_uri)
    swept = parent.data.tags.get(names.TAG_SWEPT_KEYS, "").split(",") if parent is not None else []
    first = swept_columns([key for key in swept if key], runs)
    note = _other_speedups(runs, rows) if rows is not None else None
    links = comparison_links(ui, client, runs, first, speedup=note is None)
    if parent is not None:
        client.log_batch(parent.info.run_id, tags=[RunTag(key, link) for key, link in links.items()])
    return describe_links(ui, links) + (f"\n  ({note})" if note else "")
