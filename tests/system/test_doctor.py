"""python -m runner.doctor: the host report on any machine, and one probe per Neuron assumption.

The stand-in follows the documentation by default; each of its deviation knobs flips one
assumption (tests/helpers/neuron_standin/README.md, "Deviations"), and the probe for that assumption
must then FAIL, with the exit status saying whether the runner relies on it. With no knob
every probe passes. The CUDA probes need a GPU (`make test-gpu`).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from runner import names
from runner.doctor import neuron_probes
from runner.doctor.__main__ import parse_args
from runner.doctor.neuron_host import NeuronHost
from runner.doctor.neuron_probes import PROBE_NAMES, neuron_verdicts
from runner.doctor.probe import FAIL, PASS, Verdict
from runner.doctor.report import exit_status
from tests.helpers import REPO, STANDIN, STANDIN_PATH

# the stand-in with the two undocumented features on, so that every probe can pass
FEATURES = {"NEURON_STANDIN_CORRELATE": "1", "NEURON_STANDIN_DEVICE_TIME": "1"}


def standin_env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "PYTHONPATH"))}
    env.update(
        PYTHONPATH=str(STANDIN),
        PATH=f"{STANDIN_PATH}{os.pathsep}{env['PATH']}",
        NEURON_STANDIN_STATE=str(tmp_path / "state"),
        **extra,
    )
    return env


def doctor(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    uri = f"sqlite:///{tmp_path / 'doctor.db'}"
    cmd = [sys.executable, "-m", "runner.doctor", "--out", str(tmp_path / "report"), "--uri", uri, *args]
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_a_cpu_host_has_no_neuron_device_and_passes(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = doctor(tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert "No Neuron device here" in done.stdout and "| backends usable | cpu; backend=auto picks cpu |" in done.stdout
    assert "Traceback" not in done.stderr
    report = json.loads((tmp_path / "report" / names.DOCTOR_FILE).read_text())
    assert [(v["probe"], v["status"]) for v in report["verdicts"]] == [("mlflow_store", PASS)]
    # the findings are printed once, in the report: stderr has progress only, no list of the same
    findings = [f"{item}: {value}" for item, value in report["host"].items()] + [report["verdicts"][0]["evidence"]]
    assert [finding for finding in findings if finding in done.stderr] == [], done.stderr
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'doctor.db'}").search_runs(["1"])
    assert run.data.tags[names.TAG_KIND] == names.KIND_DOCTOR
    assert run.data.tags["doctor.mlflow_store"] == PASS
    assert run.info.status == "FINISHED"


def test_an_unknown_probe_is_refused_in_one_line(tmp_path: Path) -> None:
    done = doctor(tmp_path, dict(os.environ), "--probe", "capture_numbring")
    assert done.returncode == 2
    assert "--probe 'capture_numbring' is not a probe; choose from:" in done.stderr
    assert "capture_numbering" in done.stderr and "Traceback" not in done.stderr


def test_the_removed_timeout_flag_is_refused_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        parse_args(["--timeout-s", "60"])
    assert stopped.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line.endswith("error: --timeout-s was removed: each probe's process has a fixed limit of 600 s")


def test_an_unwritable_store_fails_the_doctor(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = doctor(tmp_path, env, "--uri", "sqlite:////nonexistent-folder/mlflow.db")
    assert done.returncode == 1
    assert "| mlflow_store | FAIL (breaks runs) |" in done.stdout
    assert (tmp_path / "report" / names.DOCTOR_PAGE_FILE).is_file()


@pytest.mark.slow
def test_on_the_documented_standin_every_probe_passes(tmp_path: Path) -> None:
    done = doctor(tmp_path, standin_env(tmp_path, FEATURES))
    report = json.loads((tmp_path / "report" / names.DOCTOR_FILE).read_text())
    statuses = {v["probe"]: v["status"] for v in report["verdicts"]}
    assert statuses == dict.fromkeys([*PROBE_NAMES, "mlflow_store"], PASS), done.stdout
    assert done.returncode == 0
    assert (tmp_path / "report" / names.DOCTOR_PAGE_FILE).read_text() in done.stdout
    (run,) = MlflowClient(f"sqlite:///{tmp_path / 'doctor.db'}").search_runs(["1"])
    assert {k: v for k, v in run.data.tags.items() if k.startswith("doctor.")} == {
        f"doctor.{name}": PASS for name in statuses
    }
    assert run.data.metrics == {"doctor/pass": len(statuses), "doctor/fail": 0.0, "doctor/unknown": 0.0}


# (stand-in knob, its value, the probe it flips, whether the runner relies on the assumption)
KNOBS = [
    ("NEURON_STANDIN_DEVIATE", "config_keywords", "neuron_config", True),
    ("NEURON_STANDIN_DEVIATE", "profile_modes", "profile_modes", True),
    ("NEURON_STANDIN_CORRELATE", "", "correlate_device_time", False),
    ("NEURON_STANDIN_DEVIATE", "queries_start_runtime", "runtime_not_started_by_queries", True),
    ("NEURON_STANDIN_DEVIATE", "no_reservation", "cores_reserved", False),
    ("NEURON_STANDIN_DEVIATE", "any_core_list", "contiguous_cores", False),
    ("NEURON_STANDIN_DEVIATE", "count_not_cached", "device_count_cached", False),
    ("NEURON_STANDIN_DEVICE_TIME", "", "device_time", False),
    ("NEURON_STANDIN_FAULT", "empty_ntff", "capture_layout", True),
    ("NEURON_STANDIN_DEVIATE", "trace_name", "framework_trace_name", False),
    ("NEURON_STANDIN_DEVIATE", "summary_shape", "summary_json", False),
    ("NEURON_STANDIN_DEVIATE", "no_parquet", "explorer_parquet", False),
    ("NEURON_STANDIN_DEVIATE", "no_acc_events", "acc_events", True),
    ("NEURON_STANDIN_DEVIATE", "one_capture", "captures_per_cycle", False),
    ("NEURON_STANDIN_DEVIATE", "absolute_nc", "capture_numbering", True),
    ("NEURON_STANDIN_DEVIATE", "dropped_to_stdout", "dropped_events", True),
    ("NEURON_STANDIN_DEVIATE", "slow_first_runs", "first_execution", True),
    ("NEURON_STANDIN_DEVIATE", "async_default_unset", "async_default", False),
    ("NEURON_STANDIN_DEVIATE", "inflight_set_at_import", "inflight_removed", False),
    ("NEURON_STANDIN_DEVIATE", "neff_cache_at_import", "neff_cache_in_process", True),
    ("NEURON_STANDIN_DEVIATE", "neff_cache_at_import", "compile_caches", True),
    ("NEURON_STANDIN_DEVIATE", "lnc_ignored", "lnc", True),
    ("NEURON_STANDIN_DEVIATE", "no_process_group", "process_group", True),
    ("NEURON_STANDIN_DEVIATE", "monitor_format", "neuron_monitor", True),
    ("NEURON_STANDIN_DEVIATE", "no_memory_snapshot", "memory_snapshot", False),
    ("NEURON_STANDIN_DEVIATE", "no_op_tracking", "cpu_fallbacks", False),
]
# the probes of the runtime rules of a current SDK: each also passes on its own
CURRENT_SDK_PROBES = ["async_default", "inflight_removed", "neff_cache_in_process", "process_group"]


def standin_probe(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], probe: str) -> list[Verdict]:
    """One probe's verdicts against the stand-in with `env` (an empty value unsets the variable)."""
    for name, setting in standin_env(tmp_path, env).items():
        monkeypatch.setenv(name, setting)
    for name in [name for name, setting in env.items() if not setting]:
        monkeypatch.delenv(name)
    monkeypatch.syspath_prepend(str(STANDIN))  # spawned probe processes start from this sys.path
    return neuron_verdicts(NeuronHost(list(range(8)), tmp_path / "captures", 120), lambda _: None, {probe})


def test_every_probe_has_a_knob() -> None:
    assert sorted(probe for _, _, probe, _ in KNOBS) == sorted(PROBE_NAMES)


@pytest.mark.slow
@pytest.mark.parametrize(("knob", "value", "probe", "relied_on"), KNOBS, ids=[k[2] for k in KNOBS])
def test_a_flipped_assumption_fails_its_probe(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, knob: str, value: str, probe: str, relied_on: bool
) -> None:
    verdicts = standin_probe(tmp_path, monkeypatch, {**FEATURES, knob: value}, probe)
    by_name = {v.probe: v for v in verdicts}
    assert by_name[probe].status == FAIL, by_name[probe]
    assert by_name[probe].breaks_runner == relied_on
    assert bool(by_name[probe].fix)
    # the probes that share its run (one profiled run answers four) do not fail with it
    assert all(v.status != FAIL for name, v in by_name.items() if name != probe), verdicts
    assert exit_status(verdicts) == int(relied_on)


@pytest.mark.slow
@pytest.mark.parametrize("probe", CURRENT_SDK_PROBES)
def test_on_the_documented_standin_a_current_sdk_probe_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, probe: str
) -> None:
    (verdict,) = standin_probe(tmp_path, monkeypatch, FEATURES, probe)
    assert verdict.status == PASS, verdict


@pytest.mark.slow
def test_the_compile_caches_probe_watches_torchneurons_own_caches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # watch the stand-in's defaults (the real HLO cache's is unknown): TorchNeuron's caches the job must not fill
    state = tmp_path / "state"
    watched = tuple(state / name for name in ("neff_cache", "local_cache", "hlo_cache"))
    monkeypatch.setattr(neuron_probes, "DEFAULT_CACHES", watched)
    (verdict,) = standin_probe(tmp_path, monkeypatch, FEATURES, "compile_caches")
    assert verdict.status == PASS, verdict
    assert all(str(folder) in verdict.assumption for folder in watched)


@pytest.mark.slow
@pytest.mark.parametrize(("host_lnc", "status"), [("2", PASS), ("1", FAIL)])
def test_the_lnc_probe_names_a_runtime_reporting_another_lnc_than_the_runners(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, host_lnc: str, status: str
) -> None:
    # a Trn2 host set to LNC 1 (/opt/aws/neuron/logical_nc_config) while the runner takes the documented 2
    (verdict,) = standin_probe(tmp_path, monkeypatch, {**FEATURES, "NEURON_STANDIN_HOST_LNC": host_lnc}, "lnc")
    assert verdict.status == status and verdict.breaks_runner == (status == FAIL), verdict
    assert f"neuron-ls -j's logical_neuroncore_config: {host_lnc}" in verdict.evidence
    mismatch = (
        "LNC mismatch: neuron-ls -j's logical_neuroncore_config=1 disagrees with the runner's LNC 2 (the runner's "
        "LNC is 2, the documented trn2 default: set NEURON_LOGICAL_NC_CONFIG to the LNC the job runs at)"
    )
    assert (mismatch in verdict.evidence) == (host_lnc == "1"), verdict.evidence


def test_a_users_removed_inflight_variable_is_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (verdict,) = standin_probe(
        tmp_path, monkeypatch, {"NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS": "4"}, "inflight_removed"
    )
    assert verdict.status == FAIL and not verdict.breaks_runner
    assert "this environment has NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS=4" in verdict.evidence
    assert "Neuron SDK 2.32 removed it" in verdict.fix


# the two cases of PrivateUse1 device time on a torch: which one holds is in the device_time verdict
DEVICE_TIME_CASES = [
    pytest.param("1", PASS, "self_device_time_total > 0 for some ops", id="device-columns-filled"),
    pytest.param("cpu", FAIL, "reached the profiler as CPU events, as Kineto defines them (host-side", id="host-side"),
    pytest.param("", FAIL, "no privateuse1_driver event reached the profiler", id="nothing-fed-back"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("device_time", "status", "evidence"), DEVICE_TIME_CASES)
def test_the_device_time_probe_says_which_case_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, device_time: str, status: str, evidence: str
) -> None:
    verdicts = standin_probe(
        tmp_path, monkeypatch, {**FEATURES, "NEURON_STANDIN_DEVICE_TIME": device_time}, "device_time"
    )
    verdict = next(v for v in verdicts if v.probe == "device_time")
    assert verdict.status == status and evidence in verdict.evidence, verdict
    if status == FAIL:
        assert "neuron/device_time_coverage reads 0" in verdict.fix and not verdict.breaks_runner


@pytest.mark.slow
def test_an_unknown_explorer_schema_fails_its_probe_and_runs_read_summary_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    verdicts = standin_probe(
        tmp_path, monkeypatch, {**FEATURES, "NEURON_STANDIN_EXPLORER_SCHEMA": "8.0.0"}, "explorer_parquet"
    )
    verdict = next(v for v in verdicts if v.probe == "explorer_parquet")
    assert verdict.status == FAIL and not verdict.breaks_runner
    assert verdict.evidence.startswith("read from summary-json; ")
    assert "profile schema 8.0.0 is not one the runner reads" in verdict.evidence and "KNOWN_SCHEMAS" in verdict.fix
