"""Nothing lost, nothing leaked, nothing left RUNNING: concurrent starts on a fresh store, a
half-migrated store, a full disk, planted passwords, SIGINT and SIGTERM, resumed sweeps."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import socket
import sqlite3
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
from runner.job import OWNER_FILE, STATUS_FILE
from tests.helpers import REPO, RunnerInProcess, all_runs, serve_mlflow

pytestmark = pytest.mark.slow
TINY = ["workload.hidden=16", "workload.seq_len=2", "measure=quick", "backend=cpu"]
PASSWORD = "pw-4f2a-do-not-leak"


def start(*args: str, env: dict[str, str] | None = None, cwd: Path = REPO, **popen: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "runner", *args], cwd=cwd, env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **popen,
    )  # fmt: skip


def ended(proc: subprocess.Popen[str], timeout_s: float = 120) -> tuple[str, str]:
    """Its stdout and stderr once it has ended; one still running after `timeout_s` is killed with its group."""
    try:
        return proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # a job that missed its stop leaves nothing behind for the next test
        out, err = proc.communicate()
        pytest.fail(f"still running {timeout_s:g} s after its stop; it printed last:\n{out[-1500:]}\n{err[-1500:]}")


def statuses(uri: str) -> list[str]:
    return [r.info.status for r in all_runs(uri)]


def test_four_processes_start_together_on_a_fresh_store(tmp_path: Path) -> None:
    """Two runs and two identical sweeps at once, in default folders: each job keeps its own data."""
    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    env = {"MLFLOW_TRACKING_URI": uri}
    procs = [start("+workload=rmsnorm_naive", *TINY, f"workload.seed={i}", env=env, cwd=tmp_path) for i in range(2)]
    procs += [start("-m", "+workload=rmsnorm_naive", *TINY, env=env, cwd=tmp_path) for _ in range(2)]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], [err[-2000:] for _, err in outputs]
    assert not any("Traceback" in err for _, err in outputs)
    # the identical sweeps: each counts its own job, run or skipped when the other finished first
    assert all(re.search(r"sweep: 1 job\(s\): (1 finished, 0|0 finished, 1) skipped", out) for out, _ in outputs[2:])
    runs = all_runs(uri)
    assert {r.info.status for r in runs} == {"FINISHED"}
    jobs = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) != "true"]
    folders = [
        *(tmp_path / "outputs/runs").glob(f"*/{STATUS_FILE}"),
        *(tmp_path / "outputs/sweeps").glob(f"*/*/{STATUS_FILE}"),
    ]
    assert len(folders) == 4  # one folder per job, though all four started within a second or two
    owners = {}
    for status_file in folders:
        status = json.loads(status_file.read_text())
        assert status["status"] in ("FINISHED", "SKIPPED")
        if status["status"] == "FINISHED":
            owners[status["run_id"]] = status["pid"]
        assert not (status_file.parent / OWNER_FILE).exists()  # released at the end
    assert sorted(owners) == sorted(r.info.run_id for r in jobs)
    client = mlflow.MlflowClient(uri)
    for run in jobs:
        pid = int(run.data.tags[names.TAG_PID])
        assert owners[run.info.run_id] == pid  # the status file in its folder is its own
        (trace,) = [a.path for a in client.list_artifacts(run.info.run_id, "trace/iteration_3")]
        events = json.loads(Path(client.download_artifacts(run.info.run_id, trace, str(tmp_path))).read_text())
        assert {e["pid"] for e in events["traceEvents"] if e.get("ph") == "X" and isinstance(e.get("pid"), int)} == {
            pid
        }  # the trace it logged was written by its own process
    with sqlite3.connect(tmp_path / "fresh.db") as db:
        tables = [name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    assert not [t for t in tables if t.startswith("_alembic_tmp_")]


def test_a_half_migrated_store_is_reported_with_what_to_do(tmp_path: Path, tracking_uri: str) -> None:
    store = Path(tracking_uri.removeprefix("sqlite:///"))
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE _alembic_tmp_tags (key VARCHAR(250))")
    done = subprocess.run([sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *TINY,
                           f"hydra.run.dir={tmp_path}/run"], cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert f"tracking.uri=sqlite:///{store}: the store was left half-migrated" in done.stderr
    assert "_alembic_tmp_tags" in done.stderr and "back up" in done.stderr


@contextmanager
def mounted(target: Path, *how: str) -> Iterator[Path]:
    """`mount <how...> <target>` (a tmpfs, a read-only bind) for the block; skips where mounting is not allowed."""
    target.mkdir(exist_ok=True)
    if shutil.which("mount") is None or subprocess.run(["mount", *how, str(target)], capture_output=True).returncode:
        pytest.skip(f"cannot mount {' '.join(how)} here (needs root)")
    try:
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs."""
    with mounted(tmp_path / "full", "-t", "tmpfs", "-o", "size=2m", "tmpfs") as mount:
        yield mount


def test_a_full_disk_gives_a_failed_run_and_no_broken_artifact(full_disk: Path, tracking_uri: str) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "+workload=rmsnorm_naive", "measure=quick",
                           "schedule.active=200", f"hydra.run.dir={full_disk}/run"],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "was cut short and is removed" in done.stderr and "is it full?" in done.stderr
    assert not list(full_disk.rglob("*.tmp"))  # neither the trace's nor the status file's half-written copy
    (run,) = all_runs(tracking_uri)
    error = run.data.tags[names.TAG_ERROR]
    assert run.info.status == "FAILED" and error.startswith("PhaseError: capture report: CaptureIncomplete")
    client = mlflow.MlflowClient(tracking_uri)
    traces = [a.path for a in client.list_artifacts(run.info.run_id, names.TRACE_FOLDER)]
    assert not [path for path in traces if client.list_artifacts(run.info.run_id, path)], traces  # no cut-short trace
    assert run.data.metrics[names.STEP_MEDIAN_MS] > 0  # what was measured before it (steady state) is kept
    # the status file says FAILED, or, when even that could not be written, the console says so
    status = json.loads((full_disk / "run" / "job_status.json").read_text())["status"]
    assert status == "FAILED" or "could not write job_status.json" in done.stdout + done.stderr


def test_a_full_disk_under_the_store_is_named_and_the_open_run_not_called_failed(full_disk: Path) -> None:
    store = f"sqlite:///{full_disk / 'mlflow.db'}"
    for seed in range(1, 6):  # the store and its artifacts grow with each run until the 2 MiB are gone
        done = subprocess.run([sys.executable, "-m", "runner", "+workload=rmsnorm_naive", "measure=quick",
                               "schedule=repeat", f"workload.seed={seed}", f"tracking.uri={store}",
                               f"hydra.run.dir={full_disk.parent}/run{seed}"],
                              cwd=REPO, capture_output=True, text=True)  # fmt: skip
        if done.returncode:
            break
    assert done.returncode == 1, "the 2 MiB store never filled up"
    assert "the job failed: StoreFull: the MLflow store's disk is full (database or disk is full)" in done.stderr
    # MLflow's logged tracebacks of each failed write stay out of the console (they are in error.txt)
    assert "Traceback" not in done.stderr and "mlflow.store" not in done.stderr
    assert len([line for line in done.stderr.splitlines() if "USDT:" not in line]) < 10
    # the job's run is reported as the store shows it (its close may or may not have been written)
    last = max(all_runs(store), key=lambda run: run.info.start_time)
    if "no run was opened" not in done.stderr:
        status = last.info.status
        shown = "could not be closed and shows RUNNING" if status == "RUNNING" else f"shows {status})"
        assert f"run {last.info.run_id} {shown}" in done.stderr


def test_a_store_whose_disk_fills_up_while_it_is_created_is_not_left_half_made(tmp_path: Path) -> None:
    """A fresh store on a 300 KiB tmpfs (a migrated one takes about 1 MiB): refused, then made whole with space."""
    with mounted(tmp_path / "small", "-t", "tmpfs", "-o", "size=300k", "tmpfs") as mount:
        uri = f"sqlite:///{mount / 'mlflow.db'}"
        job = [sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *TINY, f"tracking.uri={uri}"]
        full = subprocess.run([*job, f"hydra.run.dir={tmp_path}/run1"], cwd=REPO, capture_output=True, text=True)
        assert full.returncode == 1 and "Traceback" not in full.stderr
        assert f"tracking.uri={uri}: the store could not be created, its disk is full" in full.stderr
        assert [p.name for p in mount.iterdir()] == ["mlflow.db.lock"]  # no half-migrated mlflow.db
        subprocess.run(["mount", "-o", "remount,size=8m", str(mount)], check=True)
        freed = subprocess.run([*job, f"hydra.run.dir={tmp_path}/run2"], cwd=REPO, capture_output=True, text=True)
        assert freed.returncode == 0, freed.stderr[-2000:]
        assert statuses(uri) == ["FINISHED"]


@pytest.fixture
def listening_port() -> Iterator[int]:
    """A loopback port that accepts connections (and never answers)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.mark.parametrize("case", ["read-only-folder", "read-only-db", "no-driver", "env"])
def test_a_sweep_refuses_an_unusable_store_in_one_line_before_any_job(
    case: str, tmp_path: Path, tracking_uri: str, listening_port: int
) -> None:
    folder = tmp_path / "ro"
    uri = f"sqlite:///{folder}/mlflow.db"
    if case == "read-only-folder":
        mount = ["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"]
        refusal = f"the store cannot be created: {folder} is not a writable folder"
    else:  # a migrated store in a folder bound read-only, given as tracking.uri or MLFLOW_TRACKING_URI
        (tmp_path / "rw").mkdir()
        shutil.copy(tracking_uri.removeprefix("sqlite:///"), tmp_path / "rw" / "mlflow.db")
        mount = ["--bind", "-o", "ro", str(tmp_path / "rw")]
        refusal = f"the store cannot be written: {folder}/mlflow.db or its folder is read-only"
    if case == "no-driver":
        if importlib.util.find_spec("psycopg"):
            pytest.skip("psycopg is installed here")
        uri = f"postgresql://alice:{PASSWORD}@127.0.0.1:{listening_port}/db"
        refusal = "the postgresql driver is not installed (no module 'psycopg'): install it"
    given, env = ([], {"MLFLOW_TRACKING_URI": uri}) if case == "env" else ([f"tracking.uri={uri}"], {})
    with mounted(folder, *mount):
        sweep = subprocess.run(
            [sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive", *TINY, "workload.seed=1,2", *given,
             f"hydra.sweep.dir={tmp_path}/sweep"], cwd=REPO, capture_output=True, text=True, env={**os.environ, **env},
        )  # fmt: skip
        single = subprocess.run(
            [sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *TINY, *given, f"hydra.run.dir={tmp_path}/run"],
            cwd=REPO, capture_output=True, text=True, env={**os.environ, **env},
        )  # fmt: skip
    for done in (sweep, single):  # a sweep refuses the store as a single run does: one line, no job
        assert done.returncode == 1
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"error: tracking.uri={uri.replace(PASSWORD, '***')}: {refusal}")
    assert "Launching" not in sweep.stdout + sweep.stderr and not list(tmp_path.glob("sweep/*/"))


@pytest.mark.parametrize("scheme", ["http", "postgresql"])
def test_a_server_nothing_answers_at_is_refused_in_seconds_before_the_job_starts(
    tmp_path: Path, scheme: str, runner_in_process: RunnerInProcess
) -> None:
    uri = f"{scheme}://alice:{PASSWORD}@127.0.0.1:1" + ("/db" if scheme == "postgresql" else "")
    for mode, folder in [([], "hydra.run.dir"), (["-m"], "hydra.sweep.dir")]:
        began = time.monotonic()
        done = runner_in_process(
            *mode, "+workload=rmsnorm_naive", *TINY, f"tracking.uri={uri}", f"{folder}={tmp_path}/{folder}"
        )
        assert done.returncode == 1 and time.monotonic() - began < 30  # MLflow alone retries for minutes
        shown = uri.replace(PASSWORD, "***")
        assert done.stderr.strip().splitlines() == [
            f"error: tracking.uri={shown}: nothing answers at 127.0.0.1:1 (Connection refused); "
            "start the tracking server or correct the URI"
        ]
        assert not list(tmp_path.rglob("job_status.json"))  # refused before the job started (and torch loaded)


def every_text(root: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


# a distinct value per credential form; the URI's password holds an unencoded `@`, each half of it a value
PLANTED = {
    "the URI password's head": "pw-head-4f2a",
    "the URI password's tail, after its @": "pw-tail-4f2a",
    "a --password flag": PASSWORD,
    "a bearer token": "bearer-4f2a-do-not-leak",
    "an Azure account key": "azurekey4f2a+do/not/leak==",
    "a query key": "querykey-4f2a-do-not-leak",
}
# allow-listed variables the manifest records: a sweep sets them by overrides, a single run finds them set
PLANTED_ENV = {
    "NEURON_CC_FLAGS": f"--O1 --password={PASSWORD}",
    "NEURON_RT_PROXY_HEADER": f"Authorization: Bearer {PLANTED['a bearer token']}",
    "NEURON_RT_STORE": f"AccountName=acct;AccountKey={PLANTED['an Azure account key']};EndpointSuffix=core.windows.net",
    "NEURON_COMPILE_CACHE_URL": f"https://cache.example/neff?v=1&key={PLANTED['a query key']}",
}


def test_planted_credentials_are_published_nowhere(tmp_path: Path) -> None:
    """Every credential form, planted in a run and a sweep, reaches no file of theirs or the store, nor the terminal."""
    store = tmp_path / "store"  # a server of its own: its SQLite file and artifacts are searched too
    with serve_mlflow(f"sqlite:///{store / 'server.db'}", store / "artifacts") as url:
        head, tail = PLANTED["the URI password's head"], PLANTED["the URI password's tail, after its @"]
        secret_url = url.replace("http://", f"http://alice:{head}@{tail}@")
        sweep = subprocess.run(
            [sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive", *TINY, "workload.seed=1,2",
             f"tracking.uri={secret_url}", f"hydra.sweep.dir={tmp_path}/out/sweep",
             *(f"+hydra.job.env_set.{name}='{value}'" for name, value in PLANTED_ENV.items())],
            cwd=REPO, capture_output=True, text=True,
        )  # fmt: skip
        env = {**os.environ, "MLFLOW_TRACKING_URI": secret_url, **PLANTED_ENV}
        single = subprocess.run(
            [sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *TINY, f"hydra.run.dir={tmp_path}/out/run"],
            cwd=REPO, capture_output=True, text=True, env=env,
        )  # fmt: skip
        assert sweep.returncode == 0 and single.returncode == 0, (sweep.stderr[-2000:], single.stderr[-2000:])
        runs = all_runs(url)
        assert len(runs) == 4
        published = json.dumps([[r.info.run_name, r.data.params, r.data.tags] for r in runs])
    assert "alice:***@" in published  # masked, not dropped: the user can still tell which server
    terminal = sweep.stdout + sweep.stderr + single.stdout + single.stderr
    assert "alice:***@" in terminal
    # links into the UI are for the server itself: no user, no password
    assert f"runs table:   {url}/#/experiments/" in sweep.stdout and f"open it: {url}/#/experiments/" in single.stdout
    manifests = list(store.rglob(names.ENVIRONMENT_FILE))
    assert len(manifests) == 3  # the single run's and the sweep's two jobs'
    for manifest in manifests:  # the planted variables were recorded, masked
        recorded = manifest.read_text()
        for masked in ["--password=***", "Authorization: Bearer ***", "AccountKey=***;", "&key=***"]:
            assert masked in recorded, f"{masked} missing from {manifest}"
    for where, text in [("store", every_text(store)), ("output folders", every_text(tmp_path / "out")),
                        ("terminal", terminal)]:  # fmt: skip
        for form, value in PLANTED.items():
            assert value not in text, f"{form} reached the {where}"


def test_a_server_that_cannot_be_reached_does_not_leak_the_password_in_the_errors(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        secret_url = f"http://alice:{PASSWORD}@127.0.0.1:{port}"
    env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}
    job = ["+workload=rmsnorm_naive", *TINY, f"tracking.uri={secret_url}"]
    single = subprocess.run([sys.executable, "-m", "runner", *job, f"hydra.run.dir={tmp_path}/out/run"], cwd=REPO,
                            capture_output=True, text=True, env=env)  # fmt: skip
    sweep = subprocess.run([sys.executable, "-m", "runner", "-m", *job, f"hydra.sweep.dir={tmp_path}/out/sweep"],
                           cwd=REPO, capture_output=True, text=True, env=env)  # fmt: skip
    assert single.returncode == 1 and sweep.returncode == 1
    terminal = single.stdout + single.stderr + sweep.stdout + sweep.stderr
    refused = f"error: tracking.uri=http://alice:***@127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}"
    assert refused in single.stderr and refused in sweep.stderr
    for where, text in [("output folders", every_text(tmp_path / "out")), ("terminal", terminal)]:
        assert PASSWORD not in text, f"the password reached the {where}"


def wait_for_run(job_dir: Path, timeout_s: float = 180) -> None:
    """Until the job's run is open: the stop then lands while its first artifacts are logged,
    the workload is built or measured."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = job_dir / "job_status.json"
        if status.is_file() and json.loads(status.read_text() or "{}").get("run_id"):
            return
        time.sleep(0.05)
    pytest.fail(f"no run opened in {job_dir}")


SWALLOWED_STOP = """
import signal, weakref
from runner.signals import Interrupted, raise_if_stopped, stop_on_signals
stop_on_signals()
class Thing: ...
thing = Thing()
ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGTERM))
del thing  # the stop is raised inside the weakref callback, where Python drops exceptions
print("went on")
try:
    raise_if_stopped()
except Interrupted as stop:
    print("stopped", stop.exit_code)
"""


def test_a_stop_dropped_inside_a_garbage_collector_callback_is_raised_at_the_next_safe_point() -> None:
    done = subprocess.run([sys.executable, "-c", SWALLOWED_STOP], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.stdout.splitlines() == ["went on", "stopped 143"], done.stderr
    assert "Exception ignored" not in done.stderr


@pytest.mark.parametrize(
    ("signum", "launcher", "group"),
    [
        pytest.param(signal.SIGTERM, None, False, id="single-SIGTERM"),
        pytest.param(signal.SIGINT, None, False, id="single-SIGINT"),
        pytest.param(signal.SIGTERM, "inprocess", False, id="sweep-inprocess-SIGTERM"),
        pytest.param(signal.SIGINT, "isolated", True, id="sweep-isolated-ctrl-c"),
        pytest.param(signal.SIGTERM, "isolated", False, id="sweep-isolated-SIGTERM"),
    ],
)  # fmt: skip
def test_a_signal_leaves_nothing_running(
    tmp_path: Path, tracking_uri: str, signum: int, launcher: str | None, group: bool
) -> None:
    long = ["measure.steps=10000000", "measure.steps_s=null", *TINY[:2], "backend=cpu"]
    if launcher is None:
        proc = start("+workload=rmsnorm_naive", *long, f"hydra.run.dir={tmp_path}/run")
        job_dir = tmp_path / "run"
    else:  # the job measures in its own process: the sweep's rounds would time the endless steps first
        proc = start("-m", "+workload=rmsnorm_naive", "workload.seed=0,1", *long, "measure.processes=0",
                     f"hydra/launcher={launcher}", f"hydra.sweep.dir={tmp_path}/sweep")  # fmt: skip
        job_dir = tmp_path / "sweep" / "0_rmsnorm_naive"
    try:
        wait_for_run(job_dir)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # a failed wait leaves no endless job behind
        proc.communicate()
        raise
    os.killpg(proc.pid, signum) if group else proc.send_signal(signum)  # Ctrl-C reaches the whole group
    out, err = ended(proc)
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err
    runs = all_runs(tracking_uri)
    assert runs and "RUNNING" not in statuses(tracking_uri)
    job = next(r for r in runs if r.data.tags.get(names.TAG_SWEEP) != "true")
    assert (
        job.info.status == "KILLED"
        and job.data.tags[names.TAG_ERROR] == f"interrupted by {signal.Signals(signum).name}"
    )
    assert json.loads((job_dir / "job_status.json").read_text())["status"] == "KILLED"
    if launcher is not None:
        (parent,) = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true"]
        assert parent.info.status == "KILLED"
        assert "sweep stopped by a signal: 1 job(s) in flight closed KILLED" in out
        assert "sweep: 2 job(s): 0 finished, 0 skipped (already FINISHED), 0 failed, 1 killed, 1 not run" in out


def test_a_signal_during_the_sweeps_rounds_leaves_nothing_running(tmp_path: Path, tracking_uri: str) -> None:
    """Stopped while its rounds' workers time endless steps: exit 143, the parent KILLED, no process left."""
    proc = start("-m", "+workload=rmsnorm_naive", "workload.seed=0,1", "measure.steps=10000000", "measure.steps_s=null",
                 *TINY[:2], "backend=cpu", f"hydra.sweep.dir={tmp_path}/sweep")  # fmt: skip
    try:
        deadline = time.monotonic() + 180
        while not all_runs(tracking_uri) and time.monotonic() < deadline:  # the parent opens before the rounds
            time.sleep(0.1)
        time.sleep(3)  # into the rounds' first calls or their endless steps
    finally:
        proc.send_signal(signal.SIGTERM)
    out, err = ended(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "Traceback" not in err
    (parent,) = all_runs(tracking_uri)  # no job opened a run
    assert parent.info.status == "KILLED" and "sweep stopped by a signal: no job was in flight" in out
    assert "sweep: 2 job(s): 0 finished, 0 skipped (already FINISHED), 0 failed, 2 not run" in out
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the workers and the fork server go with the sweep
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    pytest.fail("a process of the stopped sweep outlived it by 10 s")


@pytest.mark.parametrize(
    ("signum", "launcher", "group"),
    [
        pytest.param(signal.SIGTERM, "inprocess", False, id="inprocess-SIGTERM"),
        pytest.param(signal.SIGINT, "isolated", True, id="isolated-ctrl-c"),
    ],
)  # fmt: skip
def test_a_signal_while_the_sweep_compares_its_jobs_closes_the_parent_killed_with_its_comparison_whole(
    tmp_path: Path, tracking_uri: str, signum: int, launcher: str, group: bool
) -> None:
    """The comparison waits (signal_points) with its table logged and its plots not: the stop lands there."""
    flag = tmp_path / "comparing"
    pause = "+hydra.callbacks.pause"
    proc = start("-m", "+workload=rmsnorm_naive", "workload.seed=0,1", *TINY, f"hydra/launcher={launcher}",
                 f"{pause}._target_=tests.helpers.signal_points.PauseInComparison", f"{pause}.flag={flag}",
                 f"hydra.sweep.dir={tmp_path}/sweep")  # fmt: skip
    deadline = time.monotonic() + 300
    while not flag.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    paused = flag.exists()
    os.killpg(proc.pid, signum) if group else proc.send_signal(signum)
    flag.unlink(missing_ok=True)  # the comparison goes on once the stop is in
    out, err = ended(proc)
    assert paused, err[-3000:]
    assert proc.returncode == 128 + signum, err[-3000:]
    assert "Traceback" not in err
    runs = all_runs(tracking_uri)
    (parent,) = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true"]
    assert parent.info.status == "KILLED"
    assert sorted(r.info.status for r in runs if r is not parent) == ["FINISHED", "FINISHED"]
    said = "sweep stopped by a signal: no job was in flight, every job had ended"
    assert said in out
    client = mlflow.MlflowClient(tracking_uri)
    logged = {a.path for a in client.list_artifacts(parent.info.run_id)}
    logged |= {a.path for a in client.list_artifacts(parent.info.run_id, names.PLOTS_FOLDER)}
    plots = [names.STEP_TIME_PLOT_FILE, names.OP_BREAKDOWN_PLOT_FILE, names.ROOFLINE_PLOT_FILE]
    assert {names.COMPARISON_FILE, names.COMPARISON_TEXT_FILE, *(f"{names.PLOTS_FOLDER}/{p}" for p in plots)} <= logged
    summary = client.download_artifacts(parent.info.run_id, names.SWEEP_SUMMARY_FILE, str(tmp_path))
    assert Path(summary).read_text().startswith(said)


def test_a_signal_after_a_single_run_finished_leaves_it_finished_and_exits_0(tmp_path: Path, tracking_uri: str) -> None:
    """The job's process signals itself once its job has returned (signal_points): nothing is left to stop."""
    late = "+hydra.callbacks.late"
    done = subprocess.run([sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *TINY,
                           f"{late}._target_=tests.helpers.signal_points.SignalAfterJob",
                           f"{late}.signum={int(signal.SIGINT)}", f"hydra.run.dir={tmp_path}/run"],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FINISHED"
    assert json.loads((tmp_path / "run" / "job_status.json").read_text())["status"] == "FINISHED"


def test_a_killed_single_run_is_closed_by_the_next_run_of_its_configuration(tmp_path: Path, tracking_uri: str) -> None:
    long = ["+workload=rmsnorm_naive", "measure.steps=10000000", "measure.steps_s=null", *TINY[:2], "backend=cpu"]
    first = start(*long, f"hydra.run.dir={tmp_path}/first")
    wait_for_run(tmp_path / "first")
    while not all_runs(tracking_uri)[0].data.tags.get(names.TAG_CONFIG_HASH):  # tagged right after it opens
        time.sleep(0.05)
    first.kill()
    first.communicate(timeout=60)
    (dead,) = all_runs(tracking_uri)
    assert dead.info.status == "RUNNING"  # kill -9: nobody closed it
    again = start(*long, f"hydra.run.dir={tmp_path}/again")
    wait_for_run(tmp_path / "again")  # its run opens after the dead one of its configuration is closed
    again.kill()
    again.communicate(timeout=60)
    closed = mlflow.MlflowClient(tracking_uri).get_run(dead.info.run_id)
    assert closed.info.status == "FAILED"
    assert closed.data.tags[names.TAG_ERROR] == f"orphaned: its process {first.pid} on {platform.node()} is gone"


def test_the_readme_order_gives_a_row_per_config(tmp_path: Path, tracking_uri: str) -> None:
    # make run, then the study: the study reuses make run's FINISHED naive run and still shows it
    first = subprocess.run([sys.executable, "-m", "runner", "+workload=rmsnorm_naive", *TINY,
                            f"hydra.run.dir={tmp_path}/run"], cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    small = [f"++{o}" for o in TINY[:2]] + TINY[2:]
    study = subprocess.run([sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive,rmsnorm_builtin", *small,
                            f"hydra.sweep.dir={tmp_path}/sweep"], cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert study.returncode == 0, study.stderr[-2000:]
    assert "1 skipped (already FINISHED)" in study.stdout
    table = [line for line in study.stdout.splitlines() if line.split()[:1] in (["1"], ["2"])]
    assert len(table) == 2 and any("FINISHED (reused)" in line for line in table)
    compared = subprocess.run([sys.executable, "-m", "runner.compare", "--uri", tracking_uri, "--format", "json"],
                              cwd=REPO, capture_output=True, text=True)  # fmt: skip
    rows = json.loads(compared.stdout)["runs"]
    assert {row["run"].split()[0] for row in rows} == {"rmsnorm_naive", "rmsnorm_builtin"}
    assert all("resume" not in row["run"] for row in rows)


def test_a_job_that_fails_before_measuring_still_has_a_failed_run(tmp_path: Path, tracking_uri: str) -> None:
    # not bad input (the config is valid): the machine cannot hold the tensors
    done = subprocess.run([sys.executable, "-m", "runner", "+workload=rmsnorm_naive", "workload.hidden=1000000000",
                           "tracking=local", f"hydra.run.dir={tmp_path}/run"],
                          cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "the job failed: RuntimeError" in done.stderr and "error.txt" in done.stderr
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FAILED" and "allocate" in run.data.tags[names.TAG_ERROR]
    assert run.data.params["workload.hidden"] == "1000000000"
    assert (tmp_path / "run" / "error.txt").read_text().startswith("Traceback")


def test_an_empty_sweep_fails(tmp_path: Path, tracking_uri: str) -> None:
    done = subprocess.run([sys.executable, "-m", "runner", "-m", "+workload=rmsnorm_naive", "workload.seed=range(0,0)",
                           f"hydra.sweep.dir={tmp_path}/sweep"], cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 1 and "sweep: no job to run" in done.stdout
    (parent,) = all_runs(tracking_uri)
    assert parent.info.status == "FAILED"
