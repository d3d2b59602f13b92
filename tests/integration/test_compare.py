"""The comparison report: the terminal table, the parent run's artifacts, the per-op diff, the MLflow UI."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import mlflow
import pytest
from mlflow.entities import Run
from runner.report.links import LOCAL_UI

from runner import names
from runner.compare import SPEEDUP, comparison_rows, render
from runner.measure.stats import mann_whitney_p
from runner.report.plots import roof
from tests.helpers import REPO, all_runs, serve_mlflow

VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")


def test_mann_whitney_matches_known_exact_values() -> None:
    assert mann_whitney_p([1, 2, 3, 4, 5], [6, 7, 8, 9, 10]) == pytest.approx(2 / 252)
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)
    assert mann_whitney_p([1, 3, 5], [2, 4, 6]) == pytest.approx(0.7)
    assert mann_whitney_p([], [1.0]) == 1.0
    many_a, many_b = [float(i) for i in range(15)], [float(i) + 100 for i in range(15)]
    assert mann_whitney_p(many_a, many_b) < 1e-4
    assert mann_whitney_p([1, 1, 2], [2, 3, 3]) == pytest.approx(0.1, abs=0.1)  # ties: the normal approximation


class Study:
    """One three-variant CPU sweep, shared by the tests of this module."""

    def __init__(self, root: Path) -> None:
        self.uri = f"sqlite:///{root / 'mlflow.db'}"
        cmd = [
            sys.executable, "-m", "runner", "-m", "+experiment=rmsnorm_comparison", "backend=cpu",
            "workload.hidden=64", "workload.seq_len=8", "measure=quick", "schedule=repeat",
            f"tracking.uri={self.uri}", f"hydra.sweep.dir={root / 'sweep'}",
        ]  # fmt: skip
        self.done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        assert self.done.returncode == 0, self.done.stderr[-3000:]
        self.client = mlflow.MlflowClient(self.uri)
        runs = all_runs(self.uri)
        self.parent = next(r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true")
        self.children = {r.data.tags[names.TAG_WORKLOAD]: r for r in runs if r.info.run_id != self.parent.info.run_id}

    def compare(self, *args: str, uri: str | None = None) -> subprocess.CompletedProcess[str]:
        """`python -m runner.compare` with the study's store in MLFLOW_TRACKING_URI (or `uri` there)."""
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri or self.uri}
        return subprocess.run([sys.executable, "-m", "runner.compare", *args], cwd=REPO, env=env,
                              capture_output=True, text=True)  # fmt: skip


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Study:
    return Study(tmp_path_factory.mktemp("study"))


def median_text(run: Run) -> str:
    return f"{run.data.metrics[names.STEP_MEDIAN_MS]:.4f}"


@pytest.mark.slow
def test_sweep_prints_the_table_and_logs_it_to_the_parent(study: Study) -> None:
    assert set(study.children) == set(VARIANTS)
    for run in study.children.values():
        assert median_text(run) in study.done.stdout  # the terminal table shows MLflow's numbers
    parent_id = study.parent.info.run_id
    files = {a.path for a in study.client.list_artifacts(parent_id)} | {
        a.path for a in study.client.list_artifacts(parent_id, "plots")
    }
    assert {"comparison.json", "comparison.md", "sweep_summary.txt"} <= files
    assert {"plots/step_time.png", "plots/op_breakdown.png", "plots/roofline.png"} <= files
    table = json.loads(Path(study.client.download_artifacts(parent_id, "comparison.json")).read_text())
    rows = [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
    assert {row["run"].split()[0] for row in rows} == set(VARIANTS)
    by_name = {row["run"].split()[0]: row for row in rows}
    for name, run in study.children.items():
        assert by_name[name]["median ms ± IQR"].startswith(median_text(run))
        assert by_name[name]["accuracy"] == "pass"
    assert by_name["rmsnorm_naive"][SPEEDUP] == "baseline"
    for name, run in study.children.items():  # the runs table's columns: each job's speedup and short name
        assert run.data.tags[names.TAG_COMPARE_SPEEDUP] == by_name[name][SPEEDUP]
        assert run.data.tags[names.TAG_COMPARE_BASELINE] == study.children["rmsnorm_naive"].info.run_name
        assert run.data.params[names.PARAM_WORKLOAD_OPTION] == name
    markdown = Path(study.client.download_artifacts(parent_id, "comparison.md")).read_text()
    assert markdown.startswith("| rank | run | status |") and markdown.count("\n") == 5  # header, rule, 3 runs
    assert sorted(row["rank"] for row in rows) == ["1", "2", "3"]


@pytest.mark.slow
def test_compare_cli_formats_and_default_sweep(study: Study) -> None:
    as_json = json.loads(study.compare("--format", "json").stdout)
    assert [row["run"].split()[0] for row in as_json] == list(VARIANTS)
    as_csv = list(csv.DictReader(io.StringIO(study.compare("--format", "csv", "--baseline", "rmsnorm_builtin").stdout)))
    assert next(r for r in as_csv if r["run"].startswith("rmsnorm_builtin"))["speedup (95% CI)"] == "baseline"
    # --uri wins over the environment
    pointed = study.compare("--format", "json", "--uri", study.uri, uri="sqlite:////nonexistent/elsewhere.db")
    assert pointed.returncode == 0 and json.loads(pointed.stdout) == as_json
    bad = study.compare("--baseline", "nothing")
    assert bad.returncode != 0 and "--baseline 'nothing' matches no compared run" in bad.stderr


@pytest.mark.slow
def test_naive_against_builtin_diff(study: Study) -> None:
    naive, builtin = study.children["rmsnorm_naive"], study.children["rmsnorm_builtin"]
    done = study.compare("--runs", naive.info.run_id, builtin.info.run_id)
    assert done.returncode == 0, done.stderr
    diff = done.stdout.split("per-op diff:")[1]
    lines = {line.split()[0]: line for line in diff.splitlines()[2:] if line.strip()}
    assert " gone " in lines["aten::add"]  # the separate +eps disappears into the fused path
    assert " new " in lines["aten::rms_norm"]
    assert "significant" in lines["aten::mul"] or "n.s." in lines["aten::mul"]  # samples from 5 cycles
    assert "1 -> 0" in lines["aten::add"] and "3 -> " in lines["aten::mul"]
    # short id prefixes, as the UI shows them; JSON holds the rows with their ids and the diff
    short = study.compare("--runs", naive.info.run_id[:8], builtin.info.run_id[:8], "--format", "json")
    document = json.loads(short.stdout)
    assert [row["run id"] for row in document["runs"]] == [naive.info.run_id, builtin.info.run_id]
    assert {row["op"] for row in document["op_diff"]} >= {"aten::rms_norm", "aten::add"}
    unknown = study.compare("--runs", "zzzz")
    assert unknown.returncode != 0 and "--runs 'zzzz': no run in this experiment" in unknown.stderr


def test_failed_runs_stay_in_the_table(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("failures")
    failed = client.create_run(experiment, run_name="broken job")
    client.set_terminated(failed.info.run_id, "FAILED")
    rows = comparison_rows(client, [client.get_run(failed.info.run_id)], None)
    assert rows[0]["run"] == "broken job" and rows[0]["status"] == "FAILED" and rows[0]["median ms ± IQR"] == "-"
    assert "FAILED" in render(rows, "table")


@pytest.fixture
def ui(study: Study, tmp_path: Path) -> Iterator[str]:
    store = study.uri.removeprefix("sqlite:///")
    with serve_mlflow(f"sqlite:///{store}", tmp_path / "artifacts") as url:
        yield url


def chromium(url: str, *args: str) -> str:
    """What headless Chromium makes of the page; wide, so the runs table renders all its key columns."""
    cmd = ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=20000",
           "--window-size=1900,1200", *args, url]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout


def page_text(dom: str) -> str:
    """The page's text without its markup, as a reader sees it."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def printed_links(output: str) -> dict[str, str]:
    """The runs-table and compare-view links a sweep or `runner.compare` printed last."""
    found = {}
    for line in output.splitlines():
        for title, key in (("runs table:", names.TAG_UI_RUNS_TABLE), ("compare view:", names.TAG_UI_COMPARE)):
            if line.strip().startswith(title):
                found[key] = line.split(title, 1)[1].strip()
    return found


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_printed_links_open_the_sweeps_runs_in_a_real_browser(study: Study, ui: str, tmp_path: Path) -> None:
    # the sweep logged to a SQLite store: its links are for `mlflow ui` (on port 5000), served here elsewhere
    links = printed_links(study.done.stdout)
    assert f"start it: mlflow ui --backend-store-uri {study.uri}" in study.done.stdout
    parent = study.client.get_run(study.parent.info.run_id)
    assert links == {key: parent.data.tags[key] for key in links} and len(links) == 2
    runs_table = links[names.TAG_UI_RUNS_TABLE].replace(LOCAL_UI, ui)
    table_page = page_text(chromium(runs_table, "--dump-dom"))
    assert all(name in table_page for name in VARIANTS), "the runs table misses a job of the sweep"
    assert " 3 matching runs" in table_page and "sweep " not in table_page  # the jobs, not the parent
    for column in (names.STEP_MEDIAN_MS, names.TAG_COMPARE_SPEEDUP, names.TAG_TIMING_STABLE, names.TAG_ACCURACY):
        assert column in table_page, f"the runs table does not show {column}"
    compare = links[names.TAG_UI_COMPARE].replace(LOCAL_UI, ui)
    compare_page = chromium(compare, "--dump-dom")
    assert all(name in compare_page for name in VARIANTS) and names.STEP_MEDIAN_MS in compare_page
    assert names.PARAM_WORKLOAD_OPTION in compare_page  # the short name among the parallel coordinates' axes
    # runner.compare pointed at the server prints links to that server itself
    served = printed_links(study.compare("--uri", ui).stdout)
    assert served[names.TAG_UI_RUNS_TABLE].startswith(f"{ui}/#/experiments/")
    assert served[names.TAG_UI_COMPARE] == compare
    shot = tmp_path / "runs_table.png"
    chromium(runs_table, f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000


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
    assert tmp_path / "cost_frontier.png" in written and (tmp_path / "cost_frontier.png").stat().st_size > 10_000
    table = render(comparison_rows(client, runs, None, None), "csv")
    costs = {row["run"]: row["$/1M steps"] for row in csv.DictReader(io.StringIO(table))}
    assert costs == {"trn": "$0.2978", "gpu": "$0.3333", "cpu": "$0.8333", "unpriced": "-"}
    assert tmp_path / "cost_frontier.png" not in write_plots(client, runs[3:], tmp_path / "none")
