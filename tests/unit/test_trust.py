"""Numbers one can bet on: speedups with intervals, the regression gate.

Synthetic samples and synthetic MLflow runs with known per-process medians, so each verdict
is known in advance.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.entities import Metric
from scipy import stats

from runner import compare, gate, names
from runner.execute import against
from runner.measure.stats import SIGNIFICANCE, holm, paired_time_ratio, time_ratio
from runner.report.pairing import compare_times
from runner.report.reader import Rounds, label
from runner.report.sweep_report import report_sweep
from runner.report.table import SPEEDUP, TEST

rng = np.random.default_rng(0)


def around(value: float, n: int, spread: float = 0.01) -> list[float]:
    """n step times near `value`, with a relative spread."""
    return list(value * (1 + spread * rng.standard_normal(n)))


def test_time_ratio_is_welchs_test_on_logs() -> None:
    base, new = [1.0, 1.02, 0.99], [1.10, 1.12, 1.09]
    estimate = time_ratio(base, new)
    assert estimate is not None
    reference = stats.ttest_ind(np.log(new), np.log(base), equal_var=False)
    assert estimate.p_value == pytest.approx(reference.pvalue)
    assert estimate.low < estimate.ratio < estimate.high and estimate.significant
    assert estimate.ratio == pytest.approx(np.exp(np.mean(np.log(new)) - np.mean(np.log(base))))
    # a margin makes the one-sided test harder to pass, never easier
    assert time_ratio(base, new, margin=0.05).p_slower > estimate.p_slower  # type: ignore[union-attr]
    assert time_ratio([1.0], new) is None  # one process: no spread, no test


# five rounds, the 2nd and 4th three times slower for both runs (a slow stretch of the host that
# both runs' workers of that round shared), the new run 10% slower in every round
SHARED_MODE_BASE = [1.00, 3.03, 0.99, 2.97, 1.01]
SHARED_MODE_NEW = [b * r for b, r in zip(SHARED_MODE_BASE, [1.10, 1.11, 1.09, 1.10, 1.105], strict=True)]


def test_pairing_by_round_catches_what_a_shared_slow_mode_hides_from_welch() -> None:
    paired = paired_time_ratio(SHARED_MODE_BASE, SHARED_MODE_NEW, margin=0.05)
    unpaired = time_ratio(SHARED_MODE_BASE, SHARED_MODE_NEW, margin=0.05)
    assert paired is not None and unpaired is not None
    assert paired.ratio == pytest.approx(1.10)  # the median per-round ratio
    assert paired.significant and paired.p_slower < 0.001 and paired.low > 1.05
    reference = stats.ttest_rel(np.log(SHARED_MODE_NEW), np.log(SHARED_MODE_BASE))
    assert paired.p_value == pytest.approx(reference.pvalue)
    assert not unpaired.significant and unpaired.p_slower > 0.4 and unpaired.low < 1 < unpaired.high
    assert paired_time_ratio([1.0], [1.1]) is None  # one round: no spread, no test
    with pytest.raises(ValueError, match="paired rounds: 2 baseline and 1 new medians"):
        paired_time_ratio([1.0, 1.0], [1.1])


def test_the_against_gate_tests_server_pairs_so_a_mode_of_one_server_is_one_sample() -> None:
    # A/A: the candidate's first server runs 15% slow in each of its three rounds, its others do not
    timed = against.SideRounds(seed=0, servers=[1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4])
    timed.ms["baseline"] = around(1.0, 12)
    timed.ms["candidate"] = [
        value * (1.15 if pair == 1 else 1.0) for value, pair in zip(around(1.0, 12), timed.servers, strict=True)
    ]
    by_round = paired_time_ratio(timed.ms["baseline"], timed.ms["candidate"], margin=0.05)
    by_servers = paired_time_ratio(timed.per_servers("baseline"), timed.per_servers("candidate"), margin=0.05)
    assert by_round is not None and by_servers is not None
    assert len(timed.per_servers("candidate")) == 4
    assert timed.per_servers("candidate")[0] == pytest.approx(
        1.15 * float(stats.gmean(timed.ms["baseline"][:3])), rel=0.05
    )
    # the slow server is one sample of four, not three rounds of evidence: its spread widens the interval
    assert by_servers.p_slower > SIGNIFICANCE and by_servers.high > 1.1 > by_round.high
    assert [against.rounds_per_servers(count) for count in (2, 3, 6, 9, 30, 31)] == [1, 1, 2, 3, 3, 3]


@pytest.mark.parametrize(
    ("ids", "test"),
    [
        pytest.param(("sweep-1", "sweep-1"), "paired, 5 rounds", id="same-rounds"),
        pytest.param(("sweep-1", "sweep-2"), "unpaired, 5+5 workers", id="different-rounds"),
        pytest.param((None, "sweep-1"), "unpaired, 5+5 workers", id="an-older-run"),
    ],
)
def test_runs_pair_only_when_timed_in_the_same_rounds(ids: tuple[str | None, str | None], test: str) -> None:
    base = Rounds(dict(enumerate(SHARED_MODE_BASE, start=1)), ids[0])
    new = Rounds(dict(enumerate(SHARED_MODE_NEW, start=1)), ids[1])
    comparison = compare_times(base, new)
    assert comparison.test == test and comparison.estimate is not None
    assert comparison.estimate.significant == test.startswith("paired")


def test_holm_adjusts_step_down() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5]) == [0.5]


def runner_experiment(client: mlflow.MlflowClient) -> str:
    """The id of the experiment the runner logs to, created on first use."""
    experiment = client.get_experiment_by_name("runner")
    return experiment.experiment_id if experiment else client.create_experiment("runner")


def synthetic_run(
    client: mlflow.MlflowClient,
    medians: list[float],
    name: str,
    config_hash: str = "cfg-a",
    stable: bool = True,
    tags: dict[str, str] | None = None,
    status: str = "FINISHED",
    round_numbers: list[int] | None = None,
    stated_pct: float | None = None,
    worker_spread_pct: float | None = None,
) -> str:
    """A job run with these per-process medians, as a job would log them (none: it died first), ended `status`.

    The medians are rounds 1, 2, ... unless `round_numbers` says which rounds they are; `stated_pct` is the
    interval the run states for the next run's median (none: a run logged before it was stated);
    `worker_spread_pct` the half-width its workers' own spread gives its median (none: logged before it).
    """
    experiment_id = runner_experiment(client)
    timing = {names.TAG_TIMING_STABLE: "true" if stable else "false"}
    run = client.create_run(
        experiment_id, run_name=name, tags={names.TAG_CONFIG_HASH: config_hash, **timing, **(tags or {})}
    )
    now = int(time.time() * 1000)
    if medians:
        numbers = round_numbers or list(range(1, len(medians) + 1))
        history = [Metric(names.PROCESS_MEDIAN_MS, v, now, n - 1) for n, v in zip(numbers, medians, strict=True)]
        client.log_batch(
            run.info.run_id, metrics=[*history, Metric(names.STEP_MEDIAN_MS, float(np.median(medians)), now, 0)]
        )
    if stated_pct is not None:
        client.log_metric(run.info.run_id, names.STEP_MEDIAN_UNCERTAINTY_PCT, stated_pct)
    if worker_spread_pct is not None:
        client.log_metric(run.info.run_id, names.WORKER_SPREAD_PCT, worker_spread_pct)
    client.set_terminated(run.info.run_id, status)
    return run.info.run_id


def synthetic_sweep(client: mlflow.MlflowClient) -> str:
    """A sweep's parent run: jobs join it with the tag `mlflow.parentRunId`."""
    experiment_id = runner_experiment(client)
    parent = client.create_run(experiment_id, run_name="sweep", tags={names.TAG_SWEEP: "true"})
    client.set_terminated(parent.info.run_id, "FINISHED")
    return parent.info.run_id


def run_gate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict[str, str]], str]:
    """The gate's exit status, its rows and what it said on stderr."""
    code = gate.main([*args, "--format", "json"])
    out, err = capsys.readouterr()
    return code, json.loads(out) if code != gate.NOT_FOUND_EXIT else [], err.strip()


@pytest.fixture
def client(tracking_uri: str) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri)


@pytest.mark.parametrize(
    ("new", "fail_above", "code", "verdict"),
    [
        pytest.param([1.10, 1.11, 1.09, 1.10], 5, 1, "REGRESSION: slower by more than 5%", id="10%-slower"),
        pytest.param([1.03, 1.02, 1.03, 1.02], 5, 0, "ok", id="within-the-margin"),
        # passes (the gate fails on evidence only), but does not read "ok"
        pytest.param([0.8, 1.4, 1.1, 1.3], 5, 0, r"could not judge: its 95% interval reaches \+\d+\.\d%, "
                     r"past the \+5% margin", id="too-noisy-to-tell"),
        # the change itself within the margin (+0.4%), its interval past it: still not "ok"
        pytest.param([0.9, 1.1, 0.95, 1.08], 5, 0, r"could not judge: its 95% interval reaches \+17\.2%, "
                     r"past the \+5% margin", id="centred-within-the-margin-too-noisy-to-tell"),
        pytest.param([0.90, 0.91, 0.89, 0.90], 5, 0, "faster", id="faster"),
        # the only job untested: the gate tested nothing
        pytest.param([1.10], 5, gate.INCOMPLETE_EXIT, "not tested: needs measure.processes >= 2 in both runs",
                     id="one-process"),
    ],
)  # fmt: skip
def test_gate_against_a_synthetic_baseline(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str], new: list[float], fail_above: int, code: int,
    verdict: str,
) -> None:  # fmt: skip
    base = synthetic_run(client, [1.0, 1.01, 0.99, 1.0], "base")
    job = synthetic_run(client, new, "new")
    exit_code, rows, _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", str(fail_above))
    assert exit_code == code and re.fullmatch(verdict, rows[0]["verdict"]), rows[0]["verdict"]


def test_gate_finds_baselines_by_tag_and_pairs_by_configuration(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    old = {names.TAG_GIT_COMMIT: "abc123"}
    synthetic_run(client, [1.0, 1.01, 0.99], "a@old", "cfg-a", tags=old)
    synthetic_run(client, [2.0, 2.02, 1.98], "b@old", "cfg-b", tags=old)
    slower_a = synthetic_run(client, [1.30, 1.31, 1.29], "a@new", "cfg-a")
    same_b = synthetic_run(client, [2.0, 2.01, 1.99], "b@new", "cfg-b")
    unmatched = synthetic_run(client, [1.0, 1.0, 1.0], "c@new", "cfg-c")
    code, rows, _ = run_gate(capsys, "--runs", slower_a, same_b, unmatched, "--baseline",
                          f"{names.TAG_GIT_COMMIT}=abc123", "--fail-above", "10")  # fmt: skip
    verdicts = {row["job"]: row["verdict"] for row in rows}
    assert code == 1
    assert verdicts == {"a@new": "REGRESSION: slower by more than 10%", "b@new": "ok",
                        "c@new": "no baseline for this configuration"}  # fmt: skip


def test_gate_corrects_for_many_jobs(client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]) -> None:
    """A borderline slowdown fails alone, and passes among twenty jobs (Holm)."""
    borderline = [1.02, 1.06, 1.04]  # one-sided p = 0.026: below 0.05, above 0.05 / 20
    base, job = (
        synthetic_run(client, [1.0, 1.01, 0.99], "base", "cfg-0"),
        synthetic_run(client, borderline, "job", "cfg-0"),
    )
    alone, _, _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", "0")
    assert alone == 1
    tag = {"baseline": "v1"}
    synthetic_run(client, [1.0, 1.01, 0.99], "base0", "cfg-0", tags=tag)
    jobs = [job]
    for i in range(1, 20):
        synthetic_run(client, [1.0, 1.01, 0.99], f"base{i}", f"cfg-{i}", tags=tag)
        jobs.append(synthetic_run(client, [1.0, 1.01, 0.99], f"job{i}", f"cfg-{i}"))
    among_many, rows, _ = run_gate(capsys, "--runs", *jobs, "--baseline", "baseline=v1", "--fail-above", "0")
    assert among_many == 0 and len(rows) == 20


def test_gate_names_a_missing_baseline(client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]) -> None:
    job = synthetic_run(client, [1.0, 1.01], "job")
    code = gate.main(["--runs", job, "--baseline", "runner.git_commit=nope", "--fail-above", "5"])
    err = capsys.readouterr().err
    assert code == gate.NOT_FOUND_EXIT
    assert (
        err.strip()
        == "error: --baseline 'runner.git_commit=nope': no FINISHED job run has tag runner.git_commit = 'nope'"
    )


def test_gate_fails_a_job_that_did_not_finish(client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]) -> None:
    """A crashed job against a finished baseline does not pass as "1 not tested"."""
    base = synthetic_run(client, [1.0, 1.01, 0.99], "base")
    crashed = synthetic_run(client, [], "crashed", status="FAILED")
    code, (row,), why = run_gate(capsys, "--runs", crashed, "--baseline", base, "--fail-above", "5")
    assert (code, row["verdict"]) == (gate.INCOMPLETE_EXIT, "not tested: the job is FAILED")
    assert why == "gate: not passed: 1 of 1 job(s) did not finish (1 FAILED)"


@pytest.mark.parametrize(
    ("finished_job", "code"),
    [
        pytest.param([1.0, 1.01, 0.99], gate.INCOMPLETE_EXIT, id="the-rest-ok"),
        pytest.param([1.30, 1.31, 1.29], gate.REGRESSION_EXIT, id="a-regression-outranks"),
    ],
)
def test_gate_fails_a_sweep_whose_jobs_failed(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str], finished_job: list[float], code: int
) -> None:
    """The README's CI form (the latest sweep against a tag) with 2 of 3 jobs FAILED, in a real store."""
    tag = {names.TAG_GIT_COMMIT: "abc123"}
    for config in ("a", "b", "c"):
        synthetic_run(client, [1.0, 1.01, 0.99], f"{config}@old", f"cfg-{config}", tags=tag)
    sweep = {"mlflow.parentRunId": synthetic_sweep(client)}
    synthetic_run(client, finished_job, "a@new", "cfg-a", tags=sweep)
    synthetic_run(client, [], "b@new", "cfg-b", tags=sweep, status="FAILED")
    synthetic_run(client, [1.0], "c@new", "cfg-c", tags=sweep, status="KILLED")
    exit_code, rows, why = run_gate(capsys, "--baseline", f"{names.TAG_GIT_COMMIT}=abc123", "--fail-above", "5")
    assert exit_code == code
    assert [row["verdict"] for row in rows][1:] == ["not tested: the job is FAILED", "not tested: the job is KILLED"]
    assert why == "gate: not passed: 2 of 3 job(s) did not finish (1 FAILED, 1 KILLED)"


def test_gate_fails_when_it_tested_nothing(client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]) -> None:
    """No baseline of the job's configuration, or a baseline that failed: nothing tested, exit 3."""
    for config in ("b", "c"):
        synthetic_run(client, [1.0, 1.01, 0.99], f"{config}@old", f"cfg-{config}", tags={"baseline": "v1"})
    job = synthetic_run(client, [1.0, 1.01, 0.99], "job", "cfg-a")
    code, (row,), why = run_gate(capsys, "--runs", job, "--baseline", "baseline=v1", "--fail-above", "5")
    assert (code, row["verdict"]) == (gate.INCOMPLETE_EXIT, "no baseline for this configuration")
    assert why == "gate: not passed: no job could be tested (1 no baseline for this configuration)"
    crashed_base = synthetic_run(client, [], "base", status="FAILED")
    code, (row,), why = run_gate(capsys, "--runs", job, "--baseline", crashed_base, "--fail-above", "5")
    assert (code, row["verdict"]) == (gate.INCOMPLETE_EXIT, "not tested: the baseline is FAILED")
    assert why == "gate: not passed: no job could be tested (1 not tested: the baseline is FAILED)"


def test_gate_says_when_it_could_not_judge(client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]) -> None:
    """A many-fold slowdown hidden by unstable timing: not "ok", and the summary counts it."""
    base = synthetic_run(client, [1.0, 1.01, 0.99], "base")
    job = synthetic_run(client, [1.0, 30.0, 60.0], "flipped", stable=False)
    assert gate.main(["--runs", job, "--baseline", base, "--fail-above", "5"]) == 0
    out = capsys.readouterr().out
    _, (row,), _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", "5")
    high = row["change (95% CI)"].split(", ")[1].rstrip("]")
    assert row["verdict"] == f"could not judge: its 95% interval reaches {high}, past the +5% margin (timing unstable)"
    assert "gate: 0 regression(s) above +5% in 1 tested job(s), 1 of them not judged; 0 not tested" in out


def test_gate_and_compare_name_the_option_of_a_run_not_found(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    job = synthetic_run(client, [1.0, 1.01], "job")
    missing = "0123456789abcdef" * 2  # the length of an MLflow run id
    assert gate.main(["--runs", job, "--baseline", missing, "--fail-above", "5"]) == gate.NOT_FOUND_EXIT
    assert capsys.readouterr().err.strip() == f"error: --baseline '{missing}': no run has this id in this store"
    assert gate.main(["--runs", job, "--baseline", "zz", "--fail-above", "5"]) == gate.NOT_FOUND_EXIT
    assert capsys.readouterr().err.strip() == "error: --baseline 'zz': no run in this experiment has an id starting so"
    with pytest.raises(SystemExit, match=f"^error: --runs '{missing}': no run has this id in this store$"):
        compare.main(["--runs", job, missing])


def log_op_table(client: mlflow.MlflowClient, run_id: str) -> None:
    """A one-op key_averages.json, as a profiled job logs it."""
    columns = ["name", "input_shapes", "calls_per_step", "self_cpu_ms"]
    table = {"columns": columns, "data": [["aten::mul", "[[4, 8], [4, 8]]", 1, 0.5]]}
    client.log_dict(run_id, table, names.OP_TABLE_FILE)


def test_compare_does_not_diff_a_run_that_failed(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Not "every op gone, -100%": the failed run is named, in the table, the per-op diff, --diff and --replay."""
    client.create_experiment("runner", artifact_location=str(tmp_path / "artifacts"))
    ok = synthetic_run(client, [1.0, 1.01, 0.99], "ok")
    log_op_table(client, ok)
    crashed = synthetic_run(client, [], "crashed", status="FAILED")
    assert compare.main(["--runs", ok, crashed, "--format", "markdown"]) == 0
    out = capsys.readouterr().out
    assert "per-op diff: not compared: run crashed FAILED" in out and "gone" not in out and "-100%" not in out
    assert "| not compared: run FAILED |" in out  # its speedup
    assert compare.main(["--runs", crashed, ok, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["op_diff"] is None and document["op_diff_note"] == "not compared: run crashed FAILED"
    assert [row[SPEEDUP] for row in document["runs"]] == ["not compared: run FAILED",
                                                                  "not compared: baseline FAILED"]  # fmt: skip
    with pytest.raises(SystemExit, match=f"^error: --diff {crashed}: not compared: run FAILED$"):
        compare.main(["--diff", ok, crashed])
    with pytest.raises(SystemExit, match=f"^error: --replay {crashed}: not replayed: run FAILED$"):
        compare.main(["--replay", crashed])


def test_compare_prints_speedups_only_with_an_interval(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    base = synthetic_run(client, [2.0, 2.02, 1.98], "base")
    faster = synthetic_run(client, [1.0, 1.01, 0.99], "faster")
    same = synthetic_run(client, [2.0, 1.9, 2.1], "same")
    unstable = synthetic_run(client, [0.1, 0.1, 0.1], "flipped", stable=False)
    single = synthetic_run(client, [1.0], "one process")
    assert compare.main(["--runs", base, faster, same, unstable, single, "--format", "json"]) == 0
    speedups = {row["run"]: row["speedup (95% CI)"] for row in json.loads(capsys.readouterr().out)}
    assert speedups["base"] == "baseline"
    assert speedups["faster"].startswith("2.00x [1.9") and speedups["faster"].endswith("]")
    assert speedups["same"].startswith("no significant difference [")
    assert speedups["flipped"] == "not compared: run unstable"
    assert speedups["one process"] == "not compared: needs measure.processes >= 2 in both runs"
    for fmt in ("table", "csv", "markdown"):
        assert compare.main(["--runs", base, faster, unstable, "--format", fmt]) == 0
        out = capsys.readouterr().out
        assert "speedup (95% CI)" in out and "2.00x [" in out and "not compared: run unstable" in out
        assert "NO" in out  # the stable column
        assert "not resolved" not in out  # every comparison made is resolved
    # an interval that holds 1 says what would narrow it, under the table
    tight = synthetic_run(client, [2.01, 2.0, 1.99], "tight")  # no change, to within 1%: resolved, not "no significant"
    assert compare.main(["--runs", base, faster, same, tight]) == 0
    out = capsys.readouterr().out
    assert "not resolved: same against the baseline (the 95% interval holds 1 and reaches past 5%)" in out
    assert "the same within 5% [0.98, 1.02]" in out and "same, tight" not in out


def test_gate_shows_the_times_its_test_compares(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Geometric means of the per-process medians, so the change column is their ratio."""
    base, job = synthetic_run(client, [1.0, 2.0, 4.0], "base"), synthetic_run(client, [2.0, 2.0, 2.0], "job")
    _, (row,), _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", "5")
    assert (row["baseline ms"], row["job ms"]) == ("2.0000", "2.0000") and row["change (95% CI)"].startswith("+0.0%")
    gate.main(["--runs", job, "--baseline", base, "--fail-above", "5"])
    legend = "baseline ms, job ms: geometric mean of each run's per-process median step times"
    assert any(line.startswith(legend) for line in capsys.readouterr().out.splitlines())


def rounds_of(rounds_id: str) -> dict[str, str]:
    """The tag of runs timed in the rounds `rounds_id`."""
    return {names.TAG_ROUNDS_ID: rounds_id}


@pytest.mark.parametrize(
    ("job_rounds", "code", "verdict", "test"),
    [
        pytest.param("sweep-1", 1, "REGRESSION: slower by more than 5%", "paired, 5 rounds", id="same-rounds"),
        pytest.param("sweep-2", 0, "could not judge: its 95% interval reaches", "unpaired, 5+5 workers",
                     id="different-rounds"),
    ],
)  # fmt: skip
def test_gate_and_compare_pair_runs_timed_in_the_same_rounds(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str], tmp_path: Path, job_rounds: str, code: int,
    verdict: str, test: str,
) -> None:  # fmt: skip
    """A slow stretch both runs shared in rounds 2 and 4 cancels round by round; unpaired it hides the 10%."""
    client.create_experiment("runner", artifact_location=str(tmp_path / "artifacts"))
    base = synthetic_run(client, SHARED_MODE_BASE, "base", tags=rounds_of("sweep-1"))
    job = synthetic_run(client, SHARED_MODE_NEW, "new", tags=rounds_of(job_rounds))
    for run_id in (base, job):  # compare diffs their ops, as it would two finished jobs'
        log_op_table(client, run_id)
    exit_code, (row,), _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", "5")
    assert (exit_code, row["test"]) == (code, test) and row["verdict"].startswith(verdict), row
    assert compare.main(["--runs", base, job, "--format", "json"]) == 0
    compared = json.loads(capsys.readouterr().out)["runs"]
    assert [(r[SPEEDUP].split(" [")[0], r[TEST]) for r in compared] == [
        ("baseline", "-"),
        ("0.91x" if test.startswith("paired") else "no significant difference", test),
    ]
    assert compare.main(["--runs", base, job, "--format", "markdown"]) == 0
    assert f"| {test} |" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("fail_above", "code", "verdict"),
    [
        pytest.param("1", 1, "REGRESSION: slower by more than 1%", id="past-1%"),
        pytest.param("5", 0, "ok", id="within-5%"),
    ],
)
def test_runs_paired_by_round_fail_only_past_the_margin(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str], fail_above: str, code: int, verdict: str
) -> None:
    """3% slower in every round: beyond doubt, but a regression only against a margin under 3%."""
    base = synthetic_run(client, SHARED_MODE_BASE, "base", tags=rounds_of("sweep-1"))
    slower = [b * r for b, r in zip(SHARED_MODE_BASE, [1.03, 1.031, 1.029, 1.03, 1.032], strict=True)]
    job = synthetic_run(client, slower, "new", tags=rounds_of("sweep-1"))
    exit_code, (row,), _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", fail_above)
    assert (exit_code, row["test"], row["verdict"]) == (code, "paired, 5 rounds", verdict)


def test_a_run_missing_a_round_pairs_on_the_rounds_both_have(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's round 3 is missing: rounds 1, 2, 4 and 5 pair, each with its own round of the baseline."""
    base = synthetic_run(client, SHARED_MODE_BASE, "base", tags=rounds_of("sweep-1"))
    kept = [0, 1, 3, 4]
    job = synthetic_run(client, [SHARED_MODE_NEW[k] for k in kept], "new", tags=rounds_of("sweep-1"),
                        round_numbers=[k + 1 for k in kept])  # fmt: skip
    code, (row,), _ = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", "5")
    assert (code, row["test"], row["verdict"]) == (1, "paired, 4 rounds", "REGRESSION: slower by more than 5%")
    assert row["change (95% CI)"].startswith("+10.2% [")  # the median of 1.10, 1.11, 1.10, 1.105
    common_base = float(stats.gmean([SHARED_MODE_BASE[k] for k in kept]))
    assert row["baseline ms"] == f"{common_base:.4f}"  # the rounds the test compared


def test_runs_timed_apart_take_in_both_runs_stated_intervals(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each run's workers agree to 1%, but each states +-20% for the next run (its configuration's drift on this host):
    timed apart, the drift between them stays in their ratio, so the interval is 20% either side (the root-sum-square
    of two 20% halves over sqrt(2)), and a 10% difference Welch's test alone would call is not resolved."""
    base = synthetic_run(client, [2.0, 2.02, 1.98], "base", stated_pct=20.0)
    faster = synthetic_run(client, [1.0, 1.01, 0.99], "faster", stated_pct=20.0)
    near = synthetic_run(client, [1.8, 1.818, 1.782], "near", stated_pct=20.0)
    unstated = synthetic_run(client, [1.8, 1.818, 1.782], "unstated")
    assert compare.main(["--runs", base, faster, near, unstated, "--format", "json"]) == 0
    rows = {row["run"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["faster"][SPEEDUP] == f"2.00x [{2 / 1.2:.2f}, {2 * 1.2:.2f}]"
    assert rows["faster"][TEST] == "unpaired, 3+3 workers, with both runs' intervals"
    speedup = 2 / 1.8
    assert rows["near"][SPEEDUP] == f"no significant difference [{speedup / 1.2:.2f}, {speedup * 1.2:.2f}]"
    assert rows["unstated"][SPEEDUP].startswith("1.11x [")  # Welch's alone, for runs that state no interval
    assert rows["unstated"][TEST] == "unpaired, 3+3 workers"


def test_a_sweep_flags_the_jobs_whose_speedup_it_could_not_resolve(client: mlflow.MlflowClient, tmp_path: Path) -> None:
    """The comparison asked for is the sweep's: a job whose paired interval holds 1 is flagged, with what would
    narrow it; the baseline and a resolved job are not."""
    client.create_experiment("runner", artifact_location=str(tmp_path / "artifacts"))
    parent = synthetic_sweep(client)
    child = {**rounds_of("s1"), "mlflow.parentRunId": parent}
    base = synthetic_run(client, [1.0, 1.2, 0.9, 1.1, 1.0], "base", config_hash="cfg-base", tags=child)
    time.sleep(0.01)  # the sweep's baseline is its oldest job
    faster = synthetic_run(client, [0.5, 0.6, 0.45, 0.55, 0.5], "faster", config_hash="cfg-faster", tags=child)
    same = synthetic_run(client, [1.1, 1.1, 0.85, 1.0, 1.05], "same", config_hash="cfg-same", tags=child)
    # no change, the rounds agreeing to within 1%: resolved as the same
    tight = synthetic_run(client, [1.0, 1.21, 0.9, 1.1, 1.01], "tight", config_hash="cfg-tight", tags=child)
    table = report_sweep(client, client.get_run(parent), tmp_path / "plots")
    jobs = (base, faster, same, tight)
    tags = {run_id: client.get_run(run_id).data.tags for run_id in jobs}
    assert [tags[run_id][names.TAG_TIMING_STABLE] for run_id in jobs] == ["true", "true", "false", "true"]
    assert tags[tight][names.TAG_COMPARE_SPEEDUP].startswith("the same within 5% [")
    reason = tags[same][names.TAG_TIMING_REASONS]
    assert reason.startswith(
        f"its speedup over {label(client.get_run(base))} is not resolved: no significant difference ["
    )
    assert "4x as many (measure.processes) would about halve it" in reason
    assert "not resolved: same against the baseline" in table
    flagged = [line for line in table.splitlines() if line.split()[1:2] == ["same"]]
    assert len(flagged) == 1 and " NO " in flagged[0]  # the table shows the flag it set


def test_unstable_runs_that_share_rounds_are_compared_round_by_round_and_say_so(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shared slow rounds make both runs unstable; paired, they still compare, marked; unpaired they do not."""
    base = synthetic_run(client, SHARED_MODE_BASE, "base", stable=False, tags=rounds_of("sweep-1"))
    paired = synthetic_run(client, SHARED_MODE_NEW, "paired", stable=False, tags=rounds_of("sweep-1"))
    apart = synthetic_run(client, SHARED_MODE_NEW, "apart", stable=False, tags=rounds_of("sweep-2"))
    assert compare.main(["--runs", base, paired, apart, "--format", "json"]) == 0
    speedups = {r["run"]: r[SPEEDUP] for r in json.loads(capsys.readouterr().out)}
    assert speedups["paired"].startswith("0.91x [") and speedups["paired"].endswith("(timing unstable)")
    assert speedups["apart"] == "not compared: baseline unstable"


def paired_sweep(client: mlflow.MlflowClient, rounds_id: str, ratio: float, place: dict[str, str] | None = None,
                 status: str = "FINISHED", worker_spread_pct: float | None = None) -> tuple[str, str]:  # fmt: skip
    """A sweep's baseline and new run timed in rounds `rounds_id`, the new one `ratio` of the baseline each round.

    The rounds' ratios differ by 0.1% around `ratio`, so the sweep's own paired interval is about 0.2% wide.
    """
    base_ms = [1.0, 1.2, 0.9, 1.1, 1.0]
    new_ms = [b * ratio * (1 + jitter) for b, jitter in zip(base_ms, [0.0, 0.001, -0.001, 0.001, -0.001], strict=True)]
    tags = {**rounds_of(rounds_id), **(place or {})}
    runs = [
        synthetic_run(client, ms, name, config_hash=f"cfg-{name}", tags=tags, status=status,
                      worker_spread_pct=worker_spread_pct)
        for ms, name in ((base_ms, "base"), (new_ms, "new"))
    ]  # fmt: skip
    return runs[0], runs[1]


def compared(capsys: pytest.CaptureFixture[str], base: str, new: str) -> dict[str, str]:
    assert compare.main(["--runs", base, new, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["runs"][1]


def test_earlier_sweeps_widen_a_paired_interval_to_where_the_next_sweep_lands(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """What the rounds share cancels; what moves between sweeps widens the interval, once two earlier sweeps show it.

    Earlier sweeps ran the pair at 0.3 and 0.7; this one at 0.50: the interval is t(0.975, 2) x sqrt(2) x the sd
    of the three log ratios either side of 2.00x, far wider than this sweep's own rounds say, and it holds 1.
    """
    paired_sweep(client, "s1", 0.3)
    alone = compared(capsys, *paired_sweep(client, "s2", 0.7))
    assert alone[TEST] == "paired, 5 rounds"  # one earlier sweep shows no spread yet: the rounds' own interval
    paired_sweep(client, "elsewhere", 0.9, place={names.TAG_HOST: "another-host"})  # another host's drift
    paired_sweep(client, "stopped", 0.9, status="KILLED")
    base, new = paired_sweep(client, "s3", 0.50)
    row = compared(capsys, base, new)
    assert row[TEST] == "paired, 5 rounds, 2 earlier sweeps"
    logs = np.log([0.7, 0.3, 0.50])
    half = stats.t.ppf(0.975, 2) * np.sqrt(2) * logs.std(ddof=1)
    assert row[SPEEDUP] == f"no significant difference [{2 * np.exp(-half):.2f}, {2 * np.exp(half):.2f}]"
    assert compare.main(["--runs", base, new]) == 0
    assert "one widened by earlier sweeps (its test says so) narrows as each sweep" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("worker_spread_pct", "test"),
    [
        pytest.param(None, "paired, 5 rounds", id="logged-before-it"),
        pytest.param(0.01, "paired, 5 rounds", id="narrower-than-the-rounds"),
        pytest.param(3.0, "paired, 5 rounds, at least its workers' spread", id="wider-than-the-rounds"),
    ],
)
def test_a_paired_interval_is_at_least_what_the_workers_saw_within_themselves(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str], worker_spread_pct: float | None, test: str
) -> None:
    """Rounds that agree to 0.1% by chance do not make the interval narrower than each worker's own layouts
    allow: two medians each +-3% give a ratio +-4.2% (their root-sum-square); a wider rounds' interval stands."""
    row = compared(capsys, *paired_sweep(client, "s1", 0.5, worker_spread_pct=worker_spread_pct))
    assert row[TEST] == test
    if worker_spread_pct == 3.0:
        half = np.hypot(np.log(1.03), np.log(1.03))
        assert row[SPEEDUP] == f"2.00x [{2 * np.exp(-half):.2f}, {2 * np.exp(half):.2f}]"
    else:
        assert row[SPEEDUP].startswith("2.00x [2.00, 2.0"), row


def test_only_the_ten_newest_earlier_sweeps_count(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """The host of last month is not today's: a wild sweep eleven back no longer widens the interval."""
    paired_sweep(client, "old", 0.1)
    for number in range(10):
        paired_sweep(client, f"s{number}", 0.5 * (1 + 0.01 * (number % 2)))
    row = compared(capsys, *paired_sweep(client, "now", 0.5))
    assert row[TEST] == "paired, 5 rounds, 10 earlier sweeps"
    assert row[SPEEDUP].startswith("2.00x [1.9"), row
