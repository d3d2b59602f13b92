"""The comparison report from synthetic runs: the significance test, the table of failed runs, the plots."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import mlflow
import pytest

from runner import compare, gate, history, names
from runner.measure.stats import mann_whitney_p
from runner.report.plots import roof
from runner.report.selection import DEFAULT_EXPERIMENT, pick_baseline
from runner.report.table import comparison_rows, render


def test_mann_whitney_matches_known_exact_values() -> None:
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert mann_whitney_p([1, 3, 5], [2, 4, 6]) == pytest.approx(0.7)
    assert mann_whitney_p([], [1.0]) == 1.0
    many_a, many_b = [float(i) for i in range(15)], [float(i) + 100 for i in range(15)]
    assert mann_whitney_p(many_a, many_b) < 1e-4
    # ties: the normal approximation, by hand: U = 0.5 against a mean of 3 * 3 / 2 = 4.5, its variance corrected
    # for three pairs of ties 9 / 12 * (7 - 3 * (2**3 - 2) / (6 * 5)) = 4.8, and a continuity correction of 0.5
    assert mann_whitney_p([1, 1, 2], [2, 3, 3]) == pytest.approx(math.erfc((4.5 - 0.5 - 0.5) / math.sqrt(2 * 4.8)))


def test_failed_runs_stay_in_the_table(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("failures")
    failed = client.create_run(experiment, run_name="broken job")
    client.set_terminated(failed.info.run_id, "FAILED")
    rows = comparison_rows(client, [client.get_run(failed.info.run_id)], None)
    assert rows[0]["run"] == "broken job" and rows[0]["status"] == "FAILED" and rows[0]["median ms ± IQR"] == "-"
    assert "FAILED" in render(rows, "table")


@pytest.mark.parametrize(("x_low", "x_high"), [(0.01, 1000.0), (20.0, 2000.0), (0.001, 0.1)])
def test_roof_never_rises_above_either_ceiling(x_low: float, x_high: float) -> None:
    # 187 GFLOP/s over 25 GB/s: the ridge is at 7.48 FLOP/B; (20, 2000) starts past it, as the
    # attention sweep did, and (0.001, 0.1) ends before it
    xs, ys = roof(25.0, 187.0, x_low, x_high)
    assert xs[0] == x_low and xs[-1] == x_high and xs == sorted(xs)
    assert all(y <= 187.0 + 1e-9 and y <= x * 25.0 + 1e-9 for x, y in zip(xs, ys, strict=True))
    assert ys[-1] == min(x_high * 25.0, 187.0)


def test_pareto_front_keeps_runs_no_other_beats_on_both_axes() -> None:
    from runner.report.plots import pareto_front

    # (ms, $/1M): the 3 ms run costs more than the faster 2 ms one, so it is off the frontier
    points = [(3.0, 1.5), (1.0, 2.8), (2.0, 0.6), (2.0, 0.9)]
    assert pareto_front(points) == [1, 2]


def test_priced_runs_get_a_cost_frontier_plot(tracking_uri: str, tmp_path: Path) -> None:
    from runner.report.plots import write_plots

    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("costs")
    runs = []
    for name, price, median in [("trn", 1.34, 0.8), ("gpu", 4.0, 0.3), ("cpu", 0.5, 6.0), ("unpriced", None, 1.0)]:
        run = client.create_run(experiment, run_name=name)
        client.log_param(run.info.run_id, "backend.price_per_hour", price)
        for key, value in [(names.STEP_MEDIAN_MS, median), (names.STEP_P10_MS, median * 0.9)]:
            client.log_metric(run.info.run_id, key, value)
        client.log_metric(run.info.run_id, names.STEP_P90_MS, median * 1.2)
        client.set_terminated(run.info.run_id)
        runs.append(client.get_run(run.info.run_id))
    written = write_plots(client, runs, tmp_path)
    frontier = tmp_path / names.COST_FRONTIER_PLOT_FILE
    assert frontier in written and frontier.stat().st_size > 10_000
    table = render(comparison_rows(client, runs, None, None), "csv")
    costs = {row["run"]: row["$/1M steps"] for row in csv.DictReader(io.StringIO(table))}
    assert costs == {"trn": "$0.2978", "gpu": "$0.3333", "cpu": "$0.8333", "unpriced": "-"}
    assert tmp_path / "none" / names.COST_FRONTIER_PLOT_FILE not in write_plots(client, runs[3:], tmp_path / "none")


def test_a_store_nothing_answers_is_one_line_with_its_password_masked(capsys: pytest.CaptureFixture[str]) -> None:
    uri = "postgresql://bob:s3cret@127.0.0.1:1/db"
    with pytest.raises(SystemExit) as stop:
        compare.main(["--uri", uri])
    assert history.main(["--uri", uri]) == history.NOT_FOUND_EXIT
    for message in (str(stop.value.code), capsys.readouterr().err.strip()):
        assert message.startswith("error: --uri postgresql://bob:***@127.0.0.1:1/db: nothing answers at 127.0.0.1:1")
        assert "s3cret" not in message and "\n" not in message


def test_baseline_takes_a_run_id_prefix_as_runs_does(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("prefixes")
    runs = [client.get_run(client.create_run(experiment).info.run_id) for _ in range(2)]
    assert pick_baseline(runs, runs[1].info.run_id[:8]) is runs[1]
    shared = os.path.commonprefix([run.info.run_id for run in runs])
    with pytest.raises(SystemExit, match=f"^error: --baseline '{shared}': 2 compared runs have an id starting so"):
        pick_baseline(runs, shared)
    with pytest.raises(SystemExit, match="^error: --baseline 'zzzz' matches no compared run"):
        pick_baseline(runs, "zzzz")


def test_compare_history_and_gate_exit_2_on_what_they_cannot_find(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = f"sqlite:///{tmp_path}/none.db"
    assert compare.cli(["--uri", uri]) == history.main(["--uri", uri]) == 2
    assert gate.main(["--uri", uri, "--baseline", "x", "--fail-above", "5"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"error: --uri {uri}: no MLflow store there (run a job first, or pass --uri)"] * 3


def test_a_finished_run_whose_artifacts_were_deleted_is_named_not_diffed_as_every_op_gone(
    tracking_uri: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The comparison table stays whole; the per-op diff says which run's op table is gone; --replay refuses it."""
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment(DEFAULT_EXPERIMENT, artifact_location=str(tmp_path / "artifacts"))
    table = {"columns": [names.OP_NAME, names.OP_CALLS_PER_STEP, names.OP_SELF_CPU_MS], "data": [["aten::mul", 1, 0.5]]}
    kept, emptied = (client.create_run(experiment, run_name=name).info.run_id for name in ("kept", "emptied"))
    for run_id in (kept, emptied):
        client.log_dict(run_id, table, names.OP_TABLE_FILE)
        client.set_terminated(run_id)
    assert compare.main(["--runs", kept, emptied]) == 0  # whole, they compare
    assert "aten::mul" in capsys.readouterr().out.split("per-op diff:")[1]
    shutil.rmtree(tmp_path / "artifacts" / emptied)  # the run's artifacts folder, op table and all
    missing = f"run {emptied} (emptied): its op table {names.OP_TABLE_FILE} is missing from its artifacts"
    for pair in ([kept, emptied], [emptied, kept]):
        assert compare.main(["--runs", *pair]) == 0
        table, note = capsys.readouterr().out.split("per-op diff:")
        assert "kept" in table and "emptied" in table and "gone" not in note
        assert note.startswith(f" not compared: {missing}")
        assert compare.main(["--runs", *pair, "--format", "json"]) == 0
        document = json.loads(capsys.readouterr().out)
        assert len(document["runs"]) == 2 and document["op_diff"] is None
        assert document["op_diff_note"].startswith(f"not compared: {missing}")
    with pytest.raises(SystemExit, match=f"^error: {re.escape(missing)}") as refused:
        compare.main(["--replay", emptied])
    assert "\n" not in str(refused.value.code)


def test_the_table_leaves_out_empty_columns_and_puts_the_speedup_beside_the_median(
    tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing recorded GB/s, ranks or a price: those columns are left out of the terminal and markdown tables."""
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment(DEFAULT_EXPERIMENT)
    ids = []
    for name, median in [("base", 2.0), ("fast", 1.0), ("slow", 3.0)]:  # three runs: no per-op diff
        run_id = client.create_run(experiment, run_name=name, tags={names.TAG_TIMING_STABLE: "true"}).info.run_id
        client.log_metric(run_id, names.STEP_MEDIAN_MS, median)
        client.set_terminated(run_id)
        ids.append(run_id)
    for fmt in ("table", "markdown"):
        assert compare.main(["--runs", *ids, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert all(line == line.rstrip() for line in out.splitlines())  # no padding after the last column
        header = out.splitlines()[0]
        columns = [c.strip() for c in (header.strip("| ").split(" | ") if fmt == "markdown" else header.split("  "))]
        columns = [c for c in columns if c]
        assert columns[columns.index("median ms ± IQR") + 1 : columns.index("median ms ± IQR") + 3] == [
            "speedup (95% CI)",
            "test",
        ]
        assert not {"GB/s", "ranks", "$/1M steps", "device ms/step"} & set(columns)
    assert compare.main(["--runs", *ids, "--format", "csv"]) == 0  # a program's CSV keeps every column
    assert "GB/s" in capsys.readouterr().out.splitlines()[0]


def test_compare_names_the_sweep_it_shows_with_its_user_host_and_start(
    tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """On a shared store the latest sweep may be someone else's: the table's first line says whose."""
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment(DEFAULT_EXPERIMENT)
    who = {names.TAG_SWEEP: "true", names.TAG_HOST: "trn1-b", "mlflow.user": "alice"}
    parent = client.create_run(experiment, run_name="sweep +experiment=x", start_time=1_700_000_000_000, tags=who)
    job = client.create_run(experiment, run_name="job", tags={"mlflow.parentRunId": parent.info.run_id})
    client.set_terminated(job.info.run_id)
    assert compare.main([]) == 0
    started = datetime.fromtimestamp(1_700_000_000).astimezone().strftime("%Y-%m-%d %H:%M:%S %Z")
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"sweep +experiment=x (parent run {parent.info.run_id}) by alice on trn1-b, started {started}"
    assert compare.main(["--format", "csv"]) == 0  # data for programs: no header line
    assert capsys.readouterr().out.startswith("rank,")
