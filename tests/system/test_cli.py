"""The CLI: real `python -m runner` subprocess runs (one job, a two-job sweep, one bad input), and the
refusals of bad input, run in the pytest process (`runner_in_process`) where only the message is the point."""

from __future__ import annotations

import getpass
import json
import os
import platform
import subprocess
import sys
from contextlib import suppress
from pathlib import Path

import pytest

from runner import CONF_DIR, names
from runner.job import OWNER_FILE
from tests.helpers import REPO, RunnerInProcess, all_runs
from tests.system.test_safety import full_disk  # noqa: F401  (the fixture)

pytestmark = pytest.mark.slow
SMALL = ["workload.hidden=16", "workload.seq_len=2"]
TYPO = (
    ["+workload=rmsnrom_naive"],
    "workload=rmsnrom_naive is not an option; did you mean rmsnorm_naive? choose one of: allreduce",
)


def runner(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "runner", *args], cwd=REPO, capture_output=True, text=True)


@pytest.mark.smoke
def test_single_run(tmp_path: Path, tracking_uri: str) -> None:
    done = runner("+workload=rmsnorm_naive", "backend=cpu", f"hydra.run.dir={tmp_path}/run", *SMALL)
    assert done.returncode == 0, done.stderr
    assert "top ops by self CPU time" in done.stdout and "mlflow ui --backend-store-uri" in done.stdout
    (run,) = all_runs(tracking_uri)
    assert run.info.status == "FINISHED"
    assert run.data.tags[names.TAG_OVERRIDES].startswith("+workload=rmsnorm_naive")
    assert list((tmp_path / "run" / names.TRACE_FOLDER).rglob(names.TRACE_FILE))


# `python -m runner ARGS` that says as it exits whether its process started a fork server
SAYS_IF_A_FORK_SERVER_RAN = (
    "import atexit, runpy, sys\n"
    "from multiprocessing import forkserver\n"
    "atexit.register(lambda: print('fork server', forkserver._forkserver._forkserver_pid is not None))\n"
    "runpy.run_module('runner', run_name='__main__')\n"
)


@pytest.mark.parametrize(("processes", "started"), [(0, False), (1, True)])
def test_the_fork_server_starts_with_the_first_worker(
    tmp_path: Path, tracking_uri: str, processes: int, started: bool
) -> None:
    args = ["+workload=rmsnorm_naive", "backend=cpu", "measure=quick", f"measure.processes={processes}", *SMALL]
    command = [sys.executable, "-c", SAYS_IF_A_FORK_SERVER_RAN, *args, f"hydra.run.dir={tmp_path}/run"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.endswith(f"fork server {started}\n")


@pytest.mark.smoke
def test_two_job_sweep_has_one_parent(tmp_path: Path, tracking_uri: str) -> None:
    # in a sweep over workloads, workload keys need ++ (the sweep's base config has no workload)
    small = [f"++{o}" for o in SMALL]
    relative = os.path.relpath(tmp_path, REPO)  # the sweep runs in REPO
    done = runner("-m", "+workload=rmsnorm_naive,rmsnorm_builtin", "backend=cpu", f"hydra.sweep.dir={relative}", *small)
    assert done.returncode == 0, done.stderr
    runs = all_runs(tracking_uri)
    parents = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true"]
    children = [r for r in runs if r not in parents]
    assert len(parents) == 1 and len(children) == 2
    assert {r.data.tags["mlflow.parentRunId"] for r in children} == {parents[0].info.run_id}
    assert [parents[0].data.tags[names.TAG_KIND]] + [r.data.tags[names.TAG_KIND] for r in children] == [
        names.KIND_SWEEP, names.KIND_JOB, names.KIND_JOB
    ]  # fmt: skip
    # the parent's folder is absolute, as its jobs' are
    assert parents[0].data.tags[names.TAG_SWEEP_DIR] == str(tmp_path.resolve())
    # who ran it, as on its jobs: compare's header names the sweep's user
    assert parents[0].data.tags["mlflow.user"] == children[0].data.tags["mlflow.user"] == getpass.getuser()
    assert all(Path(r.data.tags[names.TAG_OUTPUT_DIR]).parent == tmp_path.resolve() for r in children)
    assert {r.info.run_name.split()[0] for r in children} == {"rmsnorm_naive", "rmsnorm_builtin"}
    assert all(r.info.status == "FINISHED" for r in runs)
    assert not (tmp_path / OWNER_FILE).exists()  # the sweep's claim on its folder is released at its end


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["+workload=triton"], "workload=triton is not an option; choose one of: allreduce", id="workload"),
        pytest.param(*TYPO, id="workload-typo"),
        pytest.param(
            ["+workload=rmsnorm_naive", "backend=tpu"],
            "backend=tpu is not an option; did you mean cpu? choose one of: auto, cpu, cuda, neuron",
            id="unknown-backend",
        ),
        pytest.param(["+workload=rmsnorm_naive", "measure.warmup_s=inf"], "measure.warmup_s=inf is not a", id="inf"),
        pytest.param(
            ["+workload=rmsnorm_naive", "measure.steps=abc"],
            "measure.steps=abc; Value 'abc' of type 'str' could not be converted to Integer",
            id="type",
        ),
        pytest.param(["+workload=rmsnorm_naive", "workload.hidden=0"], "workload.hidden must be", id="zero-size"),
        pytest.param(["+workload=rmsnorm_naive", "workload.dtype=int3"], "workload.dtype='int3'", id="dtype"),
        pytest.param(["+workload=rmsnorm_naive", "schedule.active=0"], "schedule.active must be >= 1", id="active"),
        pytest.param(["+workload=rmsnorm_naive", "profiler.recrod_shapes=true"], "profiler.recrod_shapes", id="key"),
        pytest.param(["+workload=rmsnorm_naive", "hydra.run.dir=/proc/runner"], "hydra.run.dir=/proc/runner", id="dir"),
        pytest.param(
            ["+workload=rmsnorm_naive", "tracking.uri=notascheme://x"],
            "tracking.uri='notascheme://x': MLflow takes a sqlite, postgresql",
            id="uri",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "tracking.uri=sqlite:////proc/runner/mlflow.db"],
            "the store cannot be created: /proc/runner is not a writable folder",
            id="store-dir",
        ),
        pytest.param(["+workload=rmsnorm_naive", "tracking.experiment=''"], "tracking.experiment must name", id="exp"),
        pytest.param(
            ["+workload=rmsnorm_naive", f"tracking.experiment={'e' * 501}"],
            "tracking.experiment is 501 characters long: MLflow takes at most 500",
            id="exp-long",
        ),
        pytest.param(["+workload=rmsnorm_naive", "workload.eps=abc"], "workload.eps must be a number > 0", id="eps"),
        pytest.param(
            ["+workload=aten_op", "workload.op=aten::mull"], "workload.op='aten::mull' is not an ATen op", id="aten-op"
        ),
        pytest.param(
            ["+workload=aten_op", "workload.op=aten::mm", "workload.shapes=[[4,8],[3,5]]"],
            "workload.shapes=[[4, 8], [3, 5]]: aten::mm does not take tensors of these shapes",
            id="aten-shapes",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "+measure.step=10"],
            "measure.step is not a config key; did you mean measure.steps?",
            id="plus-typo",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "measure.step=10"],
            "measure.step is not a config key; did you mean measure.steps?",
            id="typo",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "+foo=1"], "foo is not a config key; allowed: workload", id="plus-top"
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "backend=cpu", "backend.cores=0-1"],
            "backend.cores is a key of backend=neuron only; this job's backend takes: name, price_per_hour",
            id="neuron-key-off-neuron",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "backend=cpu", "measure.flush_cache=true"],
            "measure.flush_cache=true: backend=cpu times each step by the host's clock",
            id="flush-on-host-clock",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "backend=neuron", "backend.inflight_requests=4"],
            "backend.inflight_requests was removed: it set NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS, which no "
            "longer enables asynchronous execution since Neuron SDK 2.31",
            id="removed-key",
        ),
        pytest.param(
            ["+workload=rmsnorm_naive", "measure.worker_start=spawn"],
            "measure.worker_start was removed: only benchmarks chose it; RUNNER_WORKER_START=spawn starts each "
            "worker in a new interpreter",
            id="removed-benchmark-key",
        ),
    ],
)
def test_bad_input_is_one_line_with_no_traceback_and_no_run(
    args: list[str], message: str, tracking_uri: str, tmp_path: Path, runner_in_process: RunnerInProcess
) -> None:
    done = runner_in_process(f"hydra.run.dir={tmp_path}/outputs/runs/refused", *args)
    assert_refused(done, message, tmp_path, tracking_uri)


@pytest.mark.parametrize(
    ("knob", "message"),
    [
        ("RUNNER_LAYOUTS=two", "RUNNER_LAYOUTS='two' is not allowed; give a whole number >= 1"),
        ("RUNNER_KEEP_FREED_MEMORY=2", "RUNNER_KEEP_FREED_MEMORY='2' is not allowed; choose 1 (the default) or 0"),
        ("RUNNER_WORKER_START=fork", "RUNNER_WORKER_START='fork' is not allowed; choose one of: auto, spawn"),
    ],
)
def test_a_bad_benchmark_knob_is_refused_as_the_job_is_planned_before_its_run(
    knob: str, message: str, tracking_uri: str, tmp_path: Path, runner_in_process: RunnerInProcess,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The knobs are environment variables read where workers time, after the run opens: the plan reads them first."""
    monkeypatch.setenv(*knob.split("="))
    done = runner_in_process(
        f"hydra.run.dir={tmp_path}/outputs/runs/refused", "+workload=rmsnorm_naive", "measure=quick"
    )
    assert_refused(done, message, tmp_path, tracking_uri)


@pytest.mark.parametrize(
    ("limit", "message"),
    [
        ("hydra.launcher.jobs=-1", "hydra.launcher.jobs must be 0 (one per CPU core, GPU or NeuronCore group) or a "
         "count >= 1, got -1"),
        ("hydra.launcher.timeout_s=-5", "hydra.launcher.timeout_s must be seconds >= 0 (0: no limit), got -5"),
    ],
)  # fmt: skip
def test_a_sweep_refuses_a_launcher_limit_it_would_hang_or_kill_every_job_on_before_its_parent_run(
    limit: str, message: str, tracking_uri: str, tmp_path: Path, runner_in_process: RunnerInProcess
) -> None:
    sweep_dir = f"hydra.sweep.dir={tmp_path}/outputs/sweep"
    done = runner_in_process("-m", sweep_dir, "+workload=rmsnorm_naive", "hydra/launcher=parallel", limit)
    assert_refused(done, message, tmp_path, tracking_uri)


def test_a_sweep_refuses_a_folder_another_live_sweep_works_in_before_its_parent_run(
    tracking_uri: str, tmp_path: Path, runner_in_process: RunnerInProcess
) -> None:
    """Its jobs would mark the other's folders scheduled as its own: each sweep counted the other's jobs (one parent
    deleted as having none, its finished job's run left under it), seen with two sweeps given one folder at once."""
    folder = tmp_path / "sweep"
    folder.mkdir()
    with subprocess.Popen(["sleep", "30"]) as other:
        claim = json.dumps({"pid": other.pid, "host": platform.node()})
        (folder / OWNER_FILE).write_text(claim)
        done = runner_in_process("-m", f"hydra.sweep.dir={folder}", "+workload=rmsnorm_naive,rmsnorm_builtin")
        other.kill()
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr == (
        f"error: hydra.sweep.dir={folder} is in use by process {other.pid} on {platform.node()}: every job and sweep "
        f"needs its own folder (leave hydra.sweep.dir unset, or give each its own; if that process is gone, delete "
        f"{folder / OWNER_FILE})\n"
    )
    assert [p.name for p in folder.iterdir()] == [OWNER_FILE] and (folder / OWNER_FILE).read_text() == claim
    assert all_runs(tracking_uri) == []


@pytest.mark.smoke
def test_bad_input_in_a_real_process_is_one_line_with_no_traceback_and_no_run(
    tracking_uri: str, tmp_path: Path
) -> None:
    """The refusals above run in the pytest process; this one proves the real process's exit and stderr."""
    args, message = TYPO
    done = runner(f"hydra.run.dir={tmp_path}/outputs/runs/refused", *args)
    assert_refused(done, message, tmp_path, tracking_uri)


def assert_refused(done: subprocess.CompletedProcess[str], message: str, tmp_path: Path, tracking_uri: str) -> None:
    assert done.returncode != 0
    assert message in done.stderr
    assert done.stderr.startswith("error: ") and len(done.stderr.splitlines()) == 1, done.stderr
    assert not (tmp_path / "outputs").exists()  # the refused job's folder is gone, and the parents made for it
    assert "Traceback" not in done.stderr and "base_" not in done.stderr  # option lists show real options only
    assert all(r.info.status != "RUNNING" for r in all_runs(tracking_uri))
    assert all_runs(tracking_uri) == []


def test_a_failed_job_ends_with_one_line_naming_its_traceback(tmp_path: Path, tracking_uri: str) -> None:
    done = runner(
        "backend=cpu", "measure=quick", "+workload=custom", "workload._target_=tests.helpers.faulty.Faulty",
        "+workload.fault=raise", "workload.inputs=[[4]]", f"hydra.run.dir={tmp_path}/run",
    )  # fmt: skip
    assert done.returncode == 1
    (last,) = [line for line in done.stderr.splitlines() if "error" in line.lower()]
    assert done.stderr.splitlines()[-1] == last
    failed = "error: the job failed: PhaseError: steady state: RuntimeError: injected failure (traceback: "
    assert last.startswith(failed)
    assert f"{tmp_path}/run/error.txt" in last and (tmp_path / "run" / "error.txt").exists()


def test_a_full_run_folder_is_one_line_naming_it(full_disk: Path, tracking_uri: str) -> None:  # noqa: F811
    with suppress(OSError), (full_disk / "filler").open("wb", buffering=0) as filler:
        while True:  # until the disk is full
            filler.write(bytes(4096))
    done = runner("+workload=rmsnorm_naive", f"hydra.run.dir={full_disk}/run")
    assert done.returncode == 1
    assert done.stderr == f"error: hydra.run.dir={full_disk}/run cannot be written: No space left on device\n"
    assert not (full_disk / "run").exists() and all_runs(tracking_uri) == []


def test_a_conf_file_that_is_not_yaml_is_one_line_naming_its_file_and_line(
    tmp_path: Path, runner_in_process: RunnerInProcess
) -> None:
    """Adding conf/workload/<name>.yaml adds a workload; a bad indent in it gave PyYAML's 103-line traceback."""
    (tmp_path / "conf" / "workload").mkdir(parents=True)
    bad = tmp_path / "conf" / "workload" / "mine.yaml"
    bad.write_text("_target_: workloads.rmsnorm.NaiveRMSNorm\nbatch: 4\n  hidden: 3\n")
    done = runner_in_process("--config-dir", str(tmp_path / "conf"), "+workload=mine", f"hydra.run.dir={tmp_path}/run")
    assert (done.returncode, done.stderr) == (
        1, f"error: {bad}, line 3, column 9: mapping values are not allowed here: not valid YAML\n"
    )  # fmt: skip


# `python -m runner ARGS` whose up-front check of a folder writes nothing, as when the disk fills up right after it
AFTER_THE_FOLDER_CHECK = (
    "import runpy, runner.callbacks\n"
    "runner.callbacks.PROBE_BYTES = 0\n"
    "runpy.run_module('runner', run_name='__main__')\n"
)


def test_a_disk_that_fills_up_is_named_in_one_line_and_a_sweep_it_refuses_leaves_no_run(
    full_disk: Path,  # noqa: F811
    tracking_uri: str,
) -> None:
    with suppress(OSError), (full_disk / "filler").open("wb", buffering=0) as filler:
        while True:  # until the disk is full
            filler.write(bytes(4096))
    python, job = [sys.executable, "-c", AFTER_THE_FOLDER_CHECK], ["+workload=rmsnorm_naive", *SMALL]
    single = subprocess.run([*python, *job, f"hydra.run.dir={full_disk}/run"], cwd=REPO, capture_output=True, text=True)
    assert single.returncode == 1 and "Traceback" not in single.stderr
    full = "is full (No space left on device): free space there and run again"
    assert single.stderr.splitlines()[-1] == f"error: the disk under hydra.run.dir={full_disk}/run {full}"
    sweep = subprocess.run([*python, "-m", *job, "workload.seed=1,2", f"hydra.sweep.dir={full_disk}/sweep"],
                           cwd=REPO, capture_output=True, text=True)  # fmt: skip
    assert sweep.returncode == 1 and "Traceback" not in sweep.stderr, sweep.stderr
    assert f"error: the disk under hydra.sweep.dir={full_disk}/sweep {full}" in sweep.stderr
    assert "signal" not in sweep.stdout and "sweep:" not in sweep.stdout  # refused before any job: that line alone
    assert all_runs(tracking_uri) == []  # as a single run's refusal: no run (the parent opened first is deleted)


def test_a_log_file_that_cannot_be_written_prints_no_traceback(tmp_path: Path, tracking_uri: str) -> None:
    """A full disk under the job's log file (/dev/full refuses every write): each record gave logging's 20-line
    '--- Logging error ---' traceback; the console keeps every record."""
    log_file = "hydra.job_logging.handlers.file.filename=/dev/full"
    done = runner("+workload=rmsnorm_naive", *SMALL, "measure=quick", f"hydra.run.dir={tmp_path}/run", log_file)
    assert done.returncode == 0 and "Logging error" not in done.stderr and "Traceback" not in done.stderr
    assert "MLflow run " in done.stdout


def test_a_bad_value_in_one_sweep_job_refuses_the_sweep_before_any_job_runs(tmp_path: Path, tracking_uri: str) -> None:
    done = runner("-m", "+workload=rmsnorm_naive", *SMALL, "schedule.active=1,0", f"hydra.sweep.dir={tmp_path}/s")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    refusal = "error: sweep job 1 [+workload=rmsnorm_naive workload.hidden=16 workload.seq_len=2 schedule.active=0]: "
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert line.startswith(refusal) and "schedule.active must be >= 1" in line
    assert not list(tmp_path.rglob("job_status.json"))  # no job ran, none was scheduled
    assert "sweep:" not in done.stdout and "signal" not in done.stdout  # no summary: the error line alone
    assert all_runs(tracking_uri) == []  # the parent opened before the refusal is deleted: no half-written run


def test_help_lists_groups_without_importing_torch_or_mlflow() -> None:
    probe = (
        "import runpy, sys\n"
        "sys.argv = ['runner', '--help']\n"
        "try:\n    runpy.run_module('runner', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('heavy:', sorted(m for m in ('torch', 'mlflow') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "workload: " + ", ".join(sorted(p.stem for p in (CONF_DIR / "workload").glob("*.yaml"))) in out
    assert "backend: auto, cpu, cuda, neuron" in out and "base_" not in out
    assert "hydra/launcher: inprocess (the default), isolated, parallel, slurm, basic (Hydra's: no rounds)" in out
    assert "heavy: []" in out
