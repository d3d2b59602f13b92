"""Performance over time: series, intervals, change points, the plot and the exit status, on a real SQLite store.

The runs are logged with MlflowClient as a job logs them (its config hash, git commit, timing verdict,
step time and per-process medians), with known values, so each series and each step is known in advance.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.entities import Metric

from runner import history, names
from runner.report.change_points import change_points

START = 1_700_000_000_000  # ms since the epoch: runs are logged an hour apart from here
STEADY = list(1.0 + 0.01 * np.random.default_rng(0).standard_normal(24))


class Store:
    """The runner's experiment in the test's store, and runs logged into it as jobs log them."""

    def __init__(self, uri: str, artifacts: Path) -> None:
        self.uri = uri
        self.client = mlflow.MlflowClient(uri)
        # its artifacts (the history reports) in the test's folder: without a location, ./mlruns of the checkout
        self.experiment_id = self.client.create_experiment("runner", artifact_location=artifacts.as_uri())
        self.count = 0

    def run(
        self,
        value: float,
        commit: str,
        config_hash: str = "cfg-a",
        stable: bool = True,
        process_ms: list[float] | None = None,
        key: str = names.STEP_MEDIAN_MS,
        hour: int | None = None,
        parent: str | None = None,
    ) -> str:
        """A FINISHED job run of `config_hash` at `commit` that logged `value` as `key`, an hour after the last."""
        self.count += 1
        start = START + 3_600_000 * (self.count if hour is None else hour)
        tags = {
            names.TAG_KIND: names.KIND_JOB,
            names.TAG_CONFIG_HASH: config_hash,
            names.TAG_GIT_COMMIT: commit,
            names.TAG_WORKLOAD: "rmsnorm_naive",
            names.TAG_TIMING_STABLE: "true" if stable else "false",
            **({"mlflow.parentRunId": parent} if parent else {}),
        }
        run = self.client.create_run(
            self.experiment_id, start_time=start, tags=tags, run_name=f"rmsnorm_naive {config_hash}"
        )
        history_ms = [Metric(names.PROCESS_MEDIAN_MS, ms, start, k) for k, ms in enumerate(process_ms or [])]
        self.client.log_batch(run.info.run_id, metrics=[Metric(key, value, start, 0), *history_ms])
        self.client.set_terminated(run.info.run_id, "FINISHED", end_time=start + 1000)
        return run.info.run_id

    def series(
        self, values: list[float], config_hash: str = "cfg-a", stable: bool = True, key: str = names.STEP_MEDIAN_MS
    ) -> list[str]:
        """One run per value, at commits c00, c01, ..."""
        return [self.run(v, f"c{k:02d}", config_hash, stable, key=key) for k, v in enumerate(values)]


@pytest.fixture
def store(tracking_uri: str, tmp_path: Path) -> Store:
    return Store(tracking_uri, tmp_path / "artifacts")


def run_history(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict, str]:
    """The exit status, the JSON report on stdout (empty when none) and stderr."""
    code = history.main([*args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out else {}, err.strip()


def configuration(report: dict, config_hash: str = "cfg-a") -> dict:
    return next(c for c in report["configurations"] if c["config_hash"] == config_hash)


def test_a_step_is_found_where_it_is_with_its_size_and_p() -> None:
    found = change_points(STEADY[:12] + [1.2 * v for v in STEADY[12:]])
    assert [point.index for point in found] == [12]
    assert found[0].change == pytest.approx(0.2, abs=0.01) and found[0].p_value < 1e-6


@pytest.mark.parametrize("seed", range(1, 7))
def test_a_10_percent_step_through_5_percent_noise_is_found(seed: int) -> None:
    """The README's case: a 5% spread, a 10% step, 30 runs either side; PELT's penalty decides whether it is found."""
    noise = np.random.default_rng(seed).normal(0.0, 0.05, 60)
    found = change_points(list(np.exp(noise) * np.where(np.arange(60) < 30, 1.0, 1.1)))
    assert len(found) == 1 and abs(found[0].index - 30) <= 1, found
    assert found[0].change == pytest.approx(0.1, abs=0.03)


@pytest.mark.parametrize(
    "values",
    [
        pytest.param(STEADY, id="no-step"),
        pytest.param([1.0] * 12, id="constant"),
        pytest.param([1.0, 1.0, 2.0, 2.0, 2.0], id="too-short"),
        # one odd run is noise, not a step: a segment needs three points
        pytest.param(STEADY[:10] + [1.5] + STEADY[10:20], id="one-outlier"),
    ],
)
def test_no_step_no_change_point(values: list[float]) -> None:
    assert change_points(values) == []


def test_series_in_time_order_with_intervals(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    late = store.run(1.0, "c01", hour=10)
    early = store.run(1.1, "c00", hour=1, process_ms=[1.0, 1.1, 1.2])
    store.run(5.0, "c00", "cfg-b")
    code, report, _ = run_history(capsys, "--config", "cfg-a")
    points = configuration(report)["points"]
    assert code == 0 and [p["run_id"] for p in points] == [early, late]
    low, high = points[0]["interval"]
    assert low < 1.1 < high and points[1]["interval"] is None  # one process: no interval
    assert [c["config_hash"] for c in report["configurations"]] == ["cfg-a"]


def test_job_runs_count_with_or_without_their_kind_tag_and_runs_of_other_kinds_do_not(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    tagged = store.run(1.0, "c00")
    older = store.run(1.1, "c01")
    store.client.delete_tag(older, names.TAG_KIND)  # logged before job runs had the tag
    doctor = store.run(9.0, "c02")
    store.client.set_tag(doctor, names.TAG_KIND, names.KIND_DOCTOR)
    code, report, _ = run_history(capsys, "--config", "cfg-a")
    assert code == 0 and [p["run_id"] for p in configuration(report)["points"]] == [tagged, older]


def test_a_sweep_selects_its_configurations_whole_history(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    parent = store.client.create_run(store.experiment_id, run_name="sweep", tags={names.TAG_SWEEP: "true"})
    store.client.set_terminated(parent.info.run_id, "FINISHED")
    earlier = store.run(1.0, "c00", "cfg-a")
    store.run(2.0, "c00", "cfg-b")
    job = store.run(1.1, "c01", "cfg-a", parent=parent.info.run_id)
    code, report, _ = run_history(capsys, "--sweep", "sweep")
    assert code == 0 and [c["config_hash"] for c in report["configurations"]] == ["cfg-a"]
    assert [p["run_id"] for p in configuration(report)["points"]] == [earlier, job]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


def test_commit_order_follows_the_checkouts_history(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    commits = []
    for k in range(3):
        git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", f"c{k}")
        commits.append(git(repo, "rev-parse", "HEAD"))
    # measured newest commit first (a backfill), one run of a tree with changes, one of another branch
    newest, oldest = store.run(3.0, commits[2]), store.run(1.0, commits[0])
    middle = store.run(2.0, f"{commits[1]}-dirty")
    store.run(9.0, "f" * 40)
    code, report, _ = run_history(capsys, "--order", "commit", "--repo", str(repo))
    assert code == 0 and [p["run_id"] for p in configuration(report)["points"]] == [oldest, middle, newest]
    assert any("left out of the series: 1 run(s)" in note for note in report["notes"])
    code, _, err = run_history(capsys, "--order", "commit", "--repo", str(tmp_path / "nowhere"))
    assert code == history.NOT_FOUND_EXIT and err.startswith("error: --order commit:") and "\n" not in err


def test_change_point_with_its_commits_either_side(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    runs = store.series(STEADY[:10] + [1.3 * v for v in STEADY[10:20]])
    code, report, _ = run_history(capsys)
    (step,) = configuration(report)["change_points"]
    assert code == 0 and (step["before_commit"], step["after_commit"]) == ("c09", "c10")
    assert (step["before_run"], step["after_run"]) == (runs[9], runs[10])
    assert step["change"] == pytest.approx(0.3, abs=0.01) and step["p_value"] < 1e-6


def test_unstable_runs_are_shown_but_left_out_and_said_so(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    store.series(STEADY[:10])
    unstable = store.series([1.5, 1.6, 1.5, 1.6], stable=False)  # a slow stretch of the host, flagged unstable
    _, report, _ = run_history(capsys)
    found = configuration(report)
    assert len(found["points"]) == 14 and [p["used"] for p in found["points"]].count(False) == 4
    assert found["left_out"] == {"timing unstable": unstable} and found["change_points"] == []
    assert any("4 run(s) flagged timing.stable=false" in note for note in report["notes"])
    _, report, _ = run_history(capsys, "--include-unstable")
    assert len(configuration(report)["change_points"]) == 1
    assert any("--include-unstable" in note for note in report["notes"])


@pytest.mark.parametrize(
    ("factor", "args", "code"),
    [
        pytest.param(1.2, ["--fail-on-regression", "10"], history.REGRESSION_EXIT, id="20%-slower-past-10"),
        pytest.param(1.2, ["--fail-on-regression", "30"], 0, id="20%-slower-within-30"),
        pytest.param(0.8, ["--fail-on-regression", "5"], 0, id="faster"),
        pytest.param(1.2, [], 0, id="no-threshold"),
        # a rate: a fall is the regression
        pytest.param(
            0.8,
            ["--fail-on-regression", "10", "--metric", names.THROUGHPUT_STEPS_PER_S],
            history.REGRESSION_EXIT,
            id="throughput-fell",
        ),  # fmt: skip
        # bandwidth, compute and a share of the peak: higher is better too
        *(
            pytest.param(
                0.8,
                ["--fail-on-regression", "10", "--metric", key],
                history.REGRESSION_EXIT,
                id=f"{key.rpartition('/')[2]}-fell",
            )
            for key in (names.ROOFLINE_ACHIEVED_GBPS, names.ROOFLINE_ACHIEVED_GFLOPS, names.ROOFLINE_COMPUTE_FRACTION)
        ),
    ],
)
def test_fail_on_regression_judges_the_newest_segment(
    store: Store, capsys: pytest.CaptureFixture[str], factor: float, args: list[str], code: int
) -> None:
    key = args[args.index("--metric") + 1] if "--metric" in args else names.STEP_MEDIAN_MS
    store.series(STEADY[:10] + [factor * v for v in STEADY[10:20]], key=key)
    exit_code, report, _ = run_history(capsys, *args)
    assert exit_code == code and len(report["regressions"]) == (code == history.REGRESSION_EXIT)


def test_a_new_step_clock_starts_a_series_of_its_own_not_a_step(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    """A CUDA configuration's runs before the steady state was timed by device events, and after: 1.3x apart."""
    store.series(STEADY[:10])
    for run_id in store.series([1.3 * v for v in STEADY[10:20]]):
        store.client.set_tag(run_id, names.TAG_STEP_CLOCK, names.STEP_CLOCK_DEVICE)
    code, report, _ = run_history(capsys, "--fail-on-regression", "10")
    assert code == 0 and report["regressions"] == []
    assert sorted(c["config_hash"] for c in report["configurations"]) == ["cfg-a", "cfg-a-device"]


def test_fail_on_regression_that_judged_nothing_exits_3_and_says_why(
    store: Store, capsys: pytest.CaptureFixture[str]
) -> None:
    store.series(STEADY[:3])  # too few for two segments
    store.series(STEADY[:10] + [1.3 * v for v in STEADY[10:20]], "cfg-b", stable=False)  # a busy host flags every run
    code, report, err = run_history(capsys, "--fail-on-regression", "10")
    assert code == history.NOT_JUDGED_EXIT and report["regressions"] == []
    assert err == (
        "history: not judged: no configuration has 6 runs its change points can use "
        "(20 flagged timing.stable=false: --include-unstable takes them in)"
    )
    assert run_history(capsys)[0] == 0  # nothing asked to be judged
    assert run_history(capsys, "--fail-on-regression", "10", "--include-unstable")[0] == history.REGRESSION_EXIT
    store.series(STEADY[3:6])  # cfg-a now has six stable runs: one configuration is judged
    code, _, err = run_history(capsys, "--fail-on-regression", "10")
    assert code == 0 and err == ""
    with pytest.raises(SystemExit):
        history.main(["--help"])
    assert "3 --fail-on-regression judged nothing" in " ".join(capsys.readouterr().out.split())


def test_an_older_step_does_not_fail_the_newest_segment(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    store.series(STEADY[:8] + [1.3 * v for v in STEADY[8:16]] + STEADY[16:24])  # slower, then fixed
    code, report, _ = run_history(capsys, "--fail-on-regression", "5")
    assert code == 0 and len(configuration(report)["change_points"]) == 2


def test_plot_and_reports_are_logged_and_linked(
    store: Store, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store.series(STEADY[:10] + [1.3 * v for v in STEADY[10:20]])
    unstable = store.run(9.0, "c20", stable=False)
    assert history.main(["--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    (logged,) = store.client.search_runs([store.experiment_id], f"tags.`{names.TAG_KIND}` = '{names.KIND_HISTORY}'")
    assert f"/#/experiments/{store.experiment_id}/runs/{logged.info.run_id}" in out
    assert "c09 -> c10: +29.3%" in out
    files = {info.path for info in store.client.list_artifacts(logged.info.run_id)}
    plots = {info.path for info in store.client.list_artifacts(logged.info.run_id, names.PLOTS_FOLDER)}
    assert files == {names.HISTORY_TEXT_FILE, names.HISTORY_FILE, names.PLOTS_FOLDER}
    assert plots == {f"{names.PLOTS_FOLDER}/history_cfg-a.png"}
    page = (tmp_path / "out" / names.HISTORY_TEXT_FILE).read_text()
    assert "## Change points" in page and "| c09 -> c10 |" in page
    assert f"- rmsnorm_naive cfg-a: run {unstable} (timing unstable)" in page
    assert "![rmsnorm_naive cfg-a](plots/history_cfg-a.png)" in page
    assert json.loads((tmp_path / "out" / names.HISTORY_FILE).read_text())["configurations"][0]["change_points"]
    assert (tmp_path / "out" / names.PLOTS_FOLDER / "history_cfg-a.png").stat().st_size > 10_000
    # the history's own run is not a job run: a second history reads the same series
    _, report, _ = run_history(capsys)
    assert len(report["configurations"]) == 1 and len(configuration(report)["points"]) == 21


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--experiment", "nope"], "error: --experiment 'nope' does not exist", id="experiment"),
        pytest.param(["--config", "zzz"], "error: no FINISHED job run of --config zzz", id="config"),
        pytest.param(
            ["--config", "cfg"], "error: --config 'cfg': 2 configurations have a hash starting so", id="ambiguous"
        ),
        pytest.param(["--metric", "time/nothing"], "logged --metric time/nothing", id="metric"),
        pytest.param(["--sweep", "nope"], "error: --sweep 'nope' is neither a run id nor a run name", id="sweep"),
    ],
)
def test_not_found_is_one_line_and_exit_2(
    store: Store, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    store.run(1.0, "c00", "cfg-a")
    store.run(1.0, "c00", "cfg-b")
    code, _, err = run_history(capsys, *args)
    assert code == history.NOT_FOUND_EXIT and message in err and "\n" not in err


def test_a_negative_threshold_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        history.main(["--fail-on-regression", "-1"])
    assert stop.value.code == 2 and "--fail-on-regression -1: give a percentage >= 0" in capsys.readouterr().err
