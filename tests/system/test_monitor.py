"""monitor.period_s on the Neuron stand-in: neuron-monitor's series in the run, and a monitor that dies with its job.

Real `python -m runner` processes: what is tested is a process (neuron-monitor) tied to another
(the job) through failures, signals and kills.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mlflow
import pytest

from runner import names
from tests.helpers import REPO, STANDIN, all_runs
from tests.system.test_neuron_backend import neuron_host

pytestmark = pytest.mark.slow
TINY = ("+workload=rmsnorm_naive", "workload.hidden=16", "workload.seq_len=2", "measure=quick", "backend=neuron")
# a job whose measured phases last a few seconds: several samples at one a second
MONITORED = (*TINY, "backend.cores=0", "monitor=every_second", "measure.warmup_s=3")
ENDLESS = (*TINY, "backend.cores=0", "monitor=every_second", "measure.steps=10000000", "measure.steps_s=null")


def runner(tmp_path: Path, *args: str, **env: str) -> subprocess.Popen[str]:
    where = f"hydra.sweep.dir={tmp_path / 'sweep'}" if args[:1] == ("-m",) else f"hydra.run.dir={tmp_path / 'run'}"
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *args, where], cwd=REPO, env=neuron_host(tmp_path, **env),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def events(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    """The stand-in's calls of this kind so far; a line it is still writing is read next time."""
    log = tmp_path / "calls.jsonl"
    lines = log.read_text().split("\n")[:-1] if log.is_file() else []
    return [entry for entry in map(json.loads, lines) if entry["event"] == kind]


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@contextmanager
def the_monitor(tmp_path: Path, job: subprocess.Popen[str], timeout_s: float = 180) -> Iterator[int]:
    """neuron-monitor's pid once the job has started it (and it has set up its signal handling).

    Whatever the test finds, neither the job nor its monitor is left running after it.
    """
    deadline = time.monotonic() + timeout_s
    started: list[dict[str, Any]] = []
    try:
        while not (started := events(tmp_path, "monitor_start")):
            if job.poll() is not None or time.monotonic() > deadline:
                pytest.fail("no neuron-monitor started")
            time.sleep(0.05)
        yield int(started[0]["pid"])
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
        for each in started:
            if alive(each["pid"]):
                os.kill(each["pid"], signal.SIGKILL)


def history(uri: str, run_id: str, key: str) -> list[mlflow.entities.Metric]:
    return sorted(mlflow.MlflowClient(uri).get_metric_history(run_id, key), key=lambda m: m.step)


def test_neuron_monitor_series_of_the_jobs_own_cores_land_in_the_run(tmp_path: Path, tracking_uri: str) -> None:
    # another live process (this one) holds NeuronCore 5: neuron-monitor reports it, the run must not
    (tmp_path / "nrt").mkdir()
    (tmp_path / "nrt" / "nc_5.owner").write_text(f"{os.getpid()}\n")
    job = runner(tmp_path, *MONITORED)
    out, err = job.communicate(timeout=300)
    assert job.returncode == 0, err[-3000:]
    (run,) = all_runs(tracking_uri)
    system = {key for key in run.data.metrics if key.startswith(names.SYSTEM_PREFIX)}
    cores = {key for key in system if key.endswith("/utilization_pct")}
    assert cores == {names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=0)}
    utilization = history(tracking_uri, run.info.run_id, names.SYSTEM_NEURON_CORE_UTILIZATION.format(core=0))
    assert len(utilization) >= 2 and [m.step for m in utilization] == list(range(len(utilization)))
    times = [m.timestamp for m in utilization]
    assert times == sorted(set(times))  # each sample stamped when it was read
    assert utilization[0].value == 42.0  # the stand-in's figure for the core the work runs on
    assert run.data.metrics[names.SYSTEM_NEURON_DEVICE_CATEGORY_BYTES.format(category="tensors")] == 200_000
    assert run.data.metrics[names.SYSTEM_NEURON_LATENCY_MS.format(kind="device", percentile="p50")] == pytest.approx(
        0.07
    )
    assert run.data.metrics[names.SYSTEM_NEURON_ERRORS.format(kind="hardware")] == 0
    assert run.data.metrics[names.SYSTEM_NEURON_EXECUTIONS.format(outcome="completed")] == 100
    assert {names.SYSTEM_HOST_CPU_PCT, names.SYSTEM_HOST_MEMORY_USED_BYTES} <= system
    manifest = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")
    facts = manifest[names.MANIFEST_MONITOR]
    assert facts["source"] == "neuron-monitor" and facts["period_s"] == 1
    assert "aws-neuronx-tools" in facts["version"]  # no such package here: the manifest says so
    assert json.loads((tmp_path / "run" / names.NEURON_MONITOR_CONFIG_FILE).read_text())["period"] == "1s"
    (started,) = events(tmp_path, "monitor_start")
    assert [stop["pid"] for stop in events(tmp_path, "monitor_stop")] == [started["pid"]]


def test_without_neuron_monitor_one_line_says_so_and_the_host_is_sampled(tmp_path: Path, tracking_uri: str) -> None:
    tools = tmp_path / "tools"  # the Neuron tools without neuron-monitor
    tools.mkdir()
    (tools / "neuron-explorer").symlink_to(STANDIN / "bin" / "neuron-explorer")
    environ = {**neuron_host(tmp_path), "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [sys.executable, "-m", "runner", *MONITORED, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=REPO, env=environ, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    output = (done.stdout + done.stderr).splitlines()
    said = [line for line in output if "neuron-monitor is not installed" in line]
    assert len(said) == 1 and "only the host's CPU and memory are sampled" in said[0]
    (run,) = all_runs(tracking_uri)
    system = {key for key in run.data.metrics if key.startswith(names.SYSTEM_PREFIX)}
    assert system == {names.SYSTEM_HOST_CPU_PCT, names.SYSTEM_HOST_MEMORY_USED_BYTES}
    facts = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")[names.MANIFEST_MONITOR]
    assert facts["source"] == "host" and "not installed" in facts["missing"]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_job_stops_its_monitor(tmp_path: Path, tracking_uri: str, signum: int) -> None:
    job = runner(tmp_path, *ENDLESS)
    with the_monitor(tmp_path, job) as monitor:
        job.send_signal(signum)
        _, err = job.communicate(timeout=120)
        assert job.returncode == 128 + signum, err[-3000:]
        assert [stop["pid"] for stop in events(tmp_path, "monitor_stop")] == [monitor]  # the job stopped it
        assert gone_within(monitor, 1)
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "KILLED"


def test_a_failed_job_stops_its_monitor(tmp_path: Path, tracking_uri: str) -> None:
    faulty = ("+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "workload.inputs=[[64]]",
              "+workload.fault=raise", "+workload.fail_after_s=2", "measure.warmup_s=5")  # fmt: skip
    job = runner(tmp_path, *faulty, *ENDLESS[3:])
    with the_monitor(tmp_path, job) as monitor:
        _, err = job.communicate(timeout=300)
        assert job.returncode == 1, err[-3000:]
        assert "injected failure" in err
        assert [stop["pid"] for stop in events(tmp_path, "monitor_stop")] == [monitor]
        assert gone_within(monitor, 1)
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FAILED"


def test_a_killed_job_takes_its_monitor_with_it(tmp_path: Path) -> None:
    job = runner(tmp_path, *ENDLESS)
    with the_monitor(tmp_path, job) as monitor:
        job.kill()
        assert gone_within(monitor, 5)  # the kernel's doing (PR_SET_PDEATHSIG): the job had no say
        assert events(tmp_path, "monitor_stop") == []
        job.communicate(timeout=60)


def test_a_job_past_its_timeout_takes_its_monitor_with_it(tmp_path: Path, tracking_uri: str) -> None:
    sweep = runner(tmp_path, "-m", *ENDLESS, "hydra/launcher=isolated", "hydra.launcher.timeout_s=60")
    with the_monitor(tmp_path, sweep) as monitor:
        out, err = sweep.communicate(timeout=300)
        assert "killed after the per-job timeout of 60 s" in out + err
        assert gone_within(monitor, 5)
        assert events(tmp_path, "monitor_stop") == []
    assert [run.info.status for run in all_runs(tracking_uri) if run.data.tags.get(names.TAG_SWEEP) != "true"] == [
        "FAILED"
    ]
