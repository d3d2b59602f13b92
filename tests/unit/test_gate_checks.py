"""What the gate and the history judge besides time: a wrong output fails them, whatever the step times say.

Each line of `runner.report.checks` from both sides of its rule, then the gate over stored runs, the gate
`--against` (its sides' measurement stubbed; the real servers are test_gate_against's) and the history.
"""

from __future__ import annotations

import json

import mlflow
import pytest

from runner import gate, history, names
from runner.report.checks import Check, checks
from tests.unit.test_history import STEADY, Store, run_history
from tests.unit.test_history import store as store  # noqa: F401  (the fixture)
from tests.unit.test_trust import run_gate, synthetic_run
from tests.unit.test_verdicts import side_rounds

FINITE = {names.TAG_OUTPUT_FINITE: "true"}
NAN = {names.TAG_OUTPUT_FINITE: "false: 8 of 8 elements are NaN or infinite"}
PASS = {names.TAG_ACCURACY: "pass", names.TAG_ACCURACY_DETAIL: "max_rel_err 1.00e-07 against tolerance 1e-05"}
FAIL = {names.TAG_ACCURACY: "fail", names.TAG_ACCURACY_DETAIL: "max_rel_err nan against tolerance 1e-05"}


@pytest.mark.parametrize(
    ("base", "new", "expected"),
    [
        pytest.param(FINITE, NAN, [Check("output: NOT FINITE (8 of 8 elements are NaN or infinite); the baseline's "
                                         "finite", failed=True)], id="nan-where-finite"),
        pytest.param({}, NAN, [Check("output: NOT FINITE (8 of 8 elements are NaN or infinite); the baseline's not "
                                     "recorded", failed=True)], id="nan-baseline-unrecorded"),
        pytest.param(NAN, NAN, [Check("output: not finite (8 of 8 elements are NaN or infinite), as the baseline's: "
                                      "not new")], id="nan-in-both"),
        pytest.param(NAN, FINITE, [Check("output: finite")], id="fixed"),
        pytest.param(PASS, FAIL, [Check("accuracy: FAILED (max_rel_err nan against tolerance 1e-05); the baseline's "
                                        "pass", failed=True)], id="accuracy-fails"),
        pytest.param(FAIL, FAIL, [Check("accuracy: FAILED (max_rel_err nan against tolerance 1e-05); the baseline's "
                                        "fail", failed=True)], id="accuracy-fails-in-both"),
        pytest.param(FAIL, PASS, [Check("accuracy: pass (max_rel_err 1.00e-07 against tolerance 1e-05)")],
                     id="accuracy-passes"),
        pytest.param(FINITE, {}, [], id="nothing-recorded"),
    ],
)  # fmt: skip
def test_a_wrong_output_is_a_line_that_fails(base: dict, new: dict, expected: list[Check]) -> None:
    assert checks(base, new, 0.05) == expected


@pytest.mark.parametrize(
    ("new_mb", "expected"),
    [
        pytest.param(104.9, Check("peak device memory: 104.9 MB against 100 MB (+4.9%): within the +5% margin"),
                     id="4.9%-within"),
        pytest.param(105.1, Check("peak device memory: 105.1 MB against 100 MB (+5.1%): MORE than the +5% margin",
                                  failed=True), id="5.1%-past"),
    ],
)  # fmt: skip
def test_the_device_memory_peak_is_judged_against_the_margin(new_mb: float, expected: Check) -> None:
    assert checks({names.PEAK_DEVICE_MB: 100.0}, {names.PEAK_DEVICE_MB: new_mb}, 0.05) == [expected]
    assert checks({}, {names.PEAK_DEVICE_MB: new_mb}, 0.05) == []  # the baseline recorded none: nothing to judge


def test_first_call_and_host_memory_are_one_sample_a_side_so_information() -> None:
    base = {names.FIRST_CALL_S: 1.0, names.PEAK_HOST_RSS_MB: 500.0}
    new = {names.FIRST_CALL_S: 3.0, names.PEAK_HOST_RSS_MB: 1000.0}
    assert checks(base, new, 0.05) == [
        Check("first call: 3 s against 1 s (+200.0%): one sample a side, information, not judged"),
        Check("peak host memory (RSS): 1000 MB against 500 MB (+100.0%): one sample a side, information, not judged"),
    ]


@pytest.fixture
def client(tracking_uri: str) -> mlflow.MlflowClient:
    return mlflow.MlflowClient(tracking_uri)


def test_the_stored_gate_fails_a_job_whose_output_is_nan_though_its_time_is_ok(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    base = synthetic_run(client, [1.0, 1.01, 0.99, 1.0], "base", tags={**FINITE, **PASS})
    job = synthetic_run(client, [1.0, 1.01, 0.99, 1.0], "new", tags={**NAN, **FAIL})
    code, (row,), err = run_gate(capsys, "--runs", job, "--baseline", base, "--fail-above", "5")
    assert code == gate.REGRESSION_EXIT and row["verdict"] == "ok"
    assert row["checks"] == [
        "output: NOT FINITE (8 of 8 elements are NaN or infinite); the baseline's finite",
        "accuracy: FAILED (max_rel_err nan against tolerance 1e-05); the baseline's pass",
    ]
    assert err == f"gate: not passed: new ({job}): {'; '.join(row['checks'])}"
    assert gate.main(["--runs", job, "--baseline", base, "--fail-above", "5"]) == gate.REGRESSION_EXIT
    out = capsys.readouterr().out
    assert f"new ({job}):\n  output: NOT FINITE (8 of 8 elements are NaN or infinite); the baseline's finite\n" in out
    assert "0 not tested; 1 failed a check besides time (the lines above)" in out  # the table's verdict is time's
    fixed = synthetic_run(client, [1.0, 1.01, 0.99, 1.0], "fixed", tags={**FINITE, **PASS})
    code, (row,), err = run_gate(capsys, "--runs", fixed, "--baseline", base, "--fail-above", "5")
    assert (code, err) == (0, "") and row["checks"][0] == "output: finite"


def test_a_wrong_output_fails_the_gate_without_a_baseline_to_time_against(
    client: mlflow.MlflowClient, capsys: pytest.CaptureFixture[str]
) -> None:
    """No baseline of its configuration (exit 3 otherwise): a NaN output is wrong on its own, a regression."""
    for config in ("b", "c"):  # one job and one baseline would pair whatever their configurations
        synthetic_run(client, [1.0, 1.01, 0.99], f"{config}@old", f"cfg-{config}", tags={"baseline": "v1"})
    job = synthetic_run(client, [1.0, 1.01, 0.99], "new", "cfg-a", tags=NAN)
    code, (row,), _ = run_gate(capsys, "--runs", job, "--baseline", "baseline=v1", "--fail-above", "5")
    assert code == gate.REGRESSION_EXIT and row["verdict"] == "no baseline for this configuration"
    assert row["checks"] == ["output: NOT FINITE (8 of 8 elements are NaN or infinite); the baseline's not recorded"]


def test_the_against_gate_fails_a_candidate_whose_check_worker_saw_nan(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    timed = side_rounds([1.0, 1.0, 1.0, 1.0])  # the same time on both sides: "ok"
    timed.checks = {"baseline": {**FINITE, names.FIRST_CALL_S: 1.0}, "candidate": {**NAN, names.FIRST_CALL_S: 1.1}}
    monkeypatch.setattr(gate, "measure_both", lambda rev, overrides, count, seed: ("0" * 40, timed))
    args = ["--against", "HEAD", "--fail-above", "5", "--rounds", str(len(timed.servers)), "--format", "json"]
    code = gate.main(args)
    out, err = capsys.readouterr()
    (row,) = json.loads(out)
    assert code == gate.REGRESSION_EXIT and row["verdict"] == "ok"
    assert row["checks"] == [
        "output: NOT FINITE (8 of 8 elements are NaN or infinite); the baseline's finite",
        "first call: 1.1 s against 1 s (+10.0%): one sample a side, information, not judged",
    ]
    assert err.strip() == f"gate: not passed: (the default config): {row['checks'][0]}"


def test_history_fails_a_newest_run_whose_output_is_nan(store: Store, capsys: pytest.CaptureFixture[str]) -> None:
    """No step in the step time; the newest run's output NaN where the run before's was finite."""
    runs = store.series(STEADY[:10])
    for run_id in runs[:-1]:
        store.client.set_tag(run_id, names.TAG_OUTPUT_FINITE, "true")
    store.client.set_tag(runs[-1], names.TAG_OUTPUT_FINITE, NAN[names.TAG_OUTPUT_FINITE])
    code, report, _ = run_history(capsys, "--fail-on-regression", "10")
    assert code == history.REGRESSION_EXIT
    assert report["regressions"] == [
        "history: REGRESSION: rmsnorm_naive cfg-a (cfg-a): the newest run (c09) against the one before: output: NOT "
        "FINITE (8 of 8 elements are NaN or infinite); the baseline's finite"
    ]
    fixed = store.run(STEADY[10], "c10")
    store.client.set_tag(fixed, names.TAG_OUTPUT_FINITE, "true")
    code, report, _ = run_history(capsys, "--fail-on-regression", "10")
    assert code == 0 and report["regressions"] == []
    newest = "history: rmsnorm_naive cfg-a (cfg-a): the newest run (c10) against the one before"
    assert f"{newest}: output: finite" in report["notes"]
    assert run_history(capsys)[1]["notes"][-1].startswith("change points:")  # not asked to judge: no check lines
