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

from runner import names
from runner.report.table import SPEEDUP
from runner.tracking.links import LOCAL_UI
from tests.helpers import REPO, all_runs, serve_mlflow

VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")


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
        a.path for a in study.client.list_artifacts(parent_id, names.PLOTS_FOLDER)
    }
    assert {names.COMPARISON_FILE, names.COMPARISON_TEXT_FILE, names.SWEEP_SUMMARY_FILE} <= files
    assert {
        f"{names.PLOTS_FOLDER}/{names.STEP_TIME_PLOT_FILE}",
        f"{names.PLOTS_FOLDER}/{names.OP_BREAKDOWN_PLOT_FILE}",
        f"{names.PLOTS_FOLDER}/{names.ROOFLINE_PLOT_FILE}",
    } <= files
    table = json.loads(Path(study.client.download_artifacts(parent_id, names.COMPARISON_FILE)).read_text())
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
    markdown = Path(study.client.download_artifacts(parent_id, names.COMPARISON_TEXT_FILE)).read_text()
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


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (installed by .ci/run)")
def test_the_links_of_runs_of_two_experiments_show_both_runs_in_a_real_browser(
    tracking_uri: str, tmp_path: Path
) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    table = {"columns": [names.OP_NAME, names.OP_CALLS_PER_STEP, names.OP_SELF_CPU_MS], "data": [["aten::mul", 1, 0.5]]}
    run_ids = {}
    for experiment, name in (("runner", "run_in_runner"), ("elsewhere", "run_elsewhere")):
        experiment_id = client.create_experiment(experiment, artifact_location=str(tmp_path / experiment))
        run_id = client.create_run(experiment_id, run_name=name).info.run_id
        client.log_metric(run_id, names.STEP_MEDIAN_MS, 0.5)
        client.log_dict(run_id, table, names.OP_TABLE_FILE)
        client.set_terminated(run_id)
        run_ids[name] = run_id
    compare = [sys.executable, "-m", "runner.compare", "--runs", *run_ids.values()]
    env = {**os.environ, "MLFLOW_TRACKING_URI": tracking_uri}
    done = subprocess.run(compare, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    links = printed_links(done.stdout)
    with serve_mlflow(tracking_uri, tmp_path / "artifacts") as served:
        table_page = page_text(chromium(links[names.TAG_UI_RUNS_TABLE].replace(LOCAL_UI, served), "--dump-dom"))
        assert all(name in table_page for name in run_ids) and " 2 matching runs" in table_page
        assert names.STEP_MEDIAN_MS in table_page  # the shared view's columns
        compare_page = page_text(chromium(links[names.TAG_UI_COMPARE].replace(LOCAL_UI, served), "--dump-dom"))
        assert all(name in compare_page for name in run_ids) and "not found" not in compare_page.lower()
