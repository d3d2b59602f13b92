"""backend=neuron end to end against the torch-neuronx stand-in (tests/helpers/neuron_standin).

Each test runs `python -m runner` in a subprocess: the stand-in renames PyTorch's PrivateUse1
backend to "neuron" for the whole process, which must not leak into other tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import mlflow
import pytest
import torch

from runner import names
from runner.backends.cpu import CpuBackend
from runner.backends.neuron import NeuronBackend
from runner.backends.peaks import datasheet_peak
from runner.config import BackendConfig, NeuronBackendConfig
from runner.config_loading import load_run_spec
from runner.measure.build import build_workload
from tests.helpers import HELPERS, REPO, STANDIN, STANDIN_PATH, all_runs, compose_cfg

pytestmark = pytest.mark.slow
SECRET = "do-not-leak-4f2a"


TINY_RMSNORM = ("+workload=rmsnorm_naive", "workload.hidden=16", "workload.seq_len=2")


def neuron_host(tmp_path: Path, standin: bool = True, **env: str) -> dict[str, str]:
    """The environment of a process on a stand-in Neuron host, its calls logged in tmp_path."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "PYTHONPATH"))}
    environ.update(NEURON_STANDIN_LOG=str(tmp_path / "calls.jsonl"), NEURON_STANDIN_STATE=str(tmp_path / "nrt"))
    # the NEFF cache through the environment, as torch-neuronx reads it
    environ.update(TORCH_NEURONX_NEFF_CACHE_DIR=str(tmp_path / "neff_cache"), **env)
    if standin:
        environ["PYTHONPATH"] = str(STANDIN)
        environ["PATH"] = f"{STANDIN_PATH}{os.pathsep}{environ['PATH']}"
    return environ


def run_neuron(
    tmp_path: Path, *args: str, standin: bool = True, workload: tuple[str, ...] = TINY_RMSNORM, **env: str
) -> subprocess.CompletedProcess[str]:
    """`python -m runner` on a stand-in Neuron host; a sweep when args start with -m."""
    where = f"hydra.sweep.dir={tmp_path / 'sweep'}" if args[:1] == ("-m",) else f"hydra.run.dir={tmp_path / 'run'}"
    cmd = [
        sys.executable, "-m", "runner", *args[:1], *workload, "measure=quick", where, *args[1:],
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=neuron_host(tmp_path, standin, **env), capture_output=True, text=True)


def calls(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]


def the_run(uri: str) -> mlflow.entities.Run:
    (run,) = all_runs(uri)
    return run


def artifact_files(uri: str, run_id: str, path: str = "") -> list[str]:
    client = mlflow.MlflowClient(uri)
    found = []
    for item in client.list_artifacts(run_id, path):
        found.extend(artifact_files(uri, run_id, item.path) if item.is_dir else [item.path])
    return found


def test_documented_procedure_end_to_end(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(
        tmp_path, "backend=neuron", "profiler=neuron_device", "backend.cores=0-1",
        AWS_SECRET_ACCESS_KEY=SECRET, GITHUB_TOKEN=SECRET, NEURON_API_TOKEN=SECRET, NEURON_RT_LOG_LEVEL="INFO",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    events = calls(tmp_path)
    order = [e["event"] for e in events]

    # the runtime started already pinned to the requested cores
    assert events[order.index("runtime_start")]["visible_cores"] == "0-1"
    # NeuronConfig exactly as documented, capture defaulting to the core the work runs on, NEFFs beside traces
    (config,) = [e for e in events if e["event"] == "NeuronConfig"]
    assert config == {
        "event": "NeuronConfig",
        "modes": ["DEVICE", "RUNTIME"],
        "max_events_per_nc": None,
        "capture_enabled_for_nc": "0",
        "profile_output_dir": str(tmp_path / "run" / names.NEURON_PROFILE_FOLDER),
        "neff_cache_dir": str(tmp_path / "neff_cache"),
        "precache_node_info": True,
    }
    # CPU + PrivateUse1 (named NEURON once renamed); export_trace as on_trace_ready
    (export,) = [e for e in events if e["event"] == "export_trace"]
    assert export["activities"] == ["ProfilerActivity.CPU", "ProfilerActivity.NEURON"]
    # a synchronize right before every profiler step: 2 wait + 1 warmup + 1 active
    steps = [i for i, name in enumerate(order) if name == "profiler_step"]
    assert len(steps) == 4 and all(order[i - 1] == "synchronize" for i in steps)

    run = the_run(tracking_uri)
    assert run.info.status == "FINISHED"
    tags, metrics = run.data.tags, run.data.metrics
    assert tags[names.TAG_BACKEND] == "neuron" and tags[names.TAG_NEURON_CAPTURE] == "ok"
    assert tags[names.TAG_NEURON_EXPLORER].endswith("neuron-explorer: ok")
    assert tags[names.TAG_NEURON_EXPLORER_SOURCE] == "parquet-12" and tags[names.TAG_NEURON_EXPLORER_SCHEMA] == "12.0.1"
    assert tags[names.TAG_DEVICE_TIME].startswith("absent")
    assert names.DEVICE_SELF_TOTAL_MS not in metrics
    assert (
        metrics[names.NEURON_CAPTURE_OK] == 1
        and metrics[names.NEURON_NTFF_FILES] == 1
        and metrics[names.NEURON_NEFF_FILES] == 2
    )
    # core 1 is owned but idle: said in a tag and under the summary, never silently
    assert tags[names.TAG_NEURON_IDLE_CORES].startswith("pinned 2 NeuronCores (0-1) but the workload runs on 1")
    assert "WARNING: pinned 2 NeuronCores (0-1)" in done.stdout and "set backend.cores=0" in done.stdout
    assert tags[names.TAG_PLACEMENT].endswith("NeuronCores 0-1") and "ran on: " in done.stdout
    explorer = {k.removeprefix(names.NEURON_SUMMARY_PREFIX): v for k, v in metrics.items()}
    assert explorer["total_time"] > 0 and explorer["mfu_estimated_percent"] == 1.5
    assert tags["env.NEURON_RT_VISIBLE_CORES"] == "0-1" and tags["env.NEURON_RT_LOG_LEVEL"] == "INFO"
    # new NEFFs in the cache count as compilations; memory comes from max_memory_allocated()
    assert metrics[names.COMPILE_NEFFS_NEW] == 2 and metrics[names.PEAK_DEVICE_MB] == 2
    assert names.STEP_MEDIAN_MS in metrics and tags[names.TAG_ACCURACY] == "pass"

    files = artifact_files(tracking_uri, run.info.run_id)
    capture = [f for f in files if f.startswith("neuron_profile/")]
    session = {str(Path(f).parent) for f in capture}
    assert len(session) == 1 and "_pid_" in next(iter(session))
    assert {Path(f).name for f in capture} == {
        "ntrace.pb", "trace_info.pb", "trace.json", "profile_nc_0_session_0.ntff",
        "neff_1438288577794338_vnc_0.neff", "neff_9911002233445566_vnc_0.neff",
    }  # fmt: skip
    manifest = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.ENVIRONMENT_FILE}")
    # the cores the job owns, not device_count()'s answer cached before the pin (8)
    assert manifest["device"][names.MANIFEST_NEURON_CORE_COUNT] == 2 and manifest["packages"]["torch"]

    # no credential reaches MLflow: not in params, tags or any artifact
    local = Path(mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(tmp_path / "dl")))
    texts = [p.read_text(errors="replace") for p in local.rglob("*") if p.is_file()]
    everything = json.dumps([run.data.params, tags]) + "".join(texts)
    assert SECRET not in everything and "AWS_SECRET_ACCESS_KEY" not in everything
    assert "NEURON_RT_INSPECT_ENABLE" not in everything


def test_bad_capture_warns_and_the_run_still_finishes(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(
        tmp_path, "backend=neuron", "profiler=neuron_full",
        NEURON_STANDIN_FAULT="empty_ntff,no_neff,dropped_events", NEURON_STANDIN_EXPLORER="fail",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "1234 trace events were dropped" in done.stderr  # still shown to the user
    run = the_run(tracking_uri)
    assert run.info.status == "FINISHED"
    assert run.data.tags[names.TAG_NEURON_CAPTURE] == "warning"
    problems = run.data.tags[names.TAG_NEURON_CAPTURE_PROBLEMS]
    assert "zero-byte NTFF" in problems and "no .neff" in problems and "1234 trace events were dropped" in problems
    assert run.data.metrics[names.NEURON_CAPTURE_OK] == 0 and run.data.metrics[names.NEURON_DROPPED_EVENTS] == 1234
    # empty NTFFs and no NEFF are no device profile: Explorer (here one that fails) is not run
    assert run.data.tags[names.TAG_NEURON_EXPLORER].startswith("not run: the capture holds no device profile")


# (stand-in settings, the coverage logged, the tag's start, what the warning names)
COVERAGE_CASES = [
    pytest.param({"NEURON_STANDIN_DEVICE_TIME": "1"}, 1.0, "ok: ", None, id="device-columns-filled"),
    pytest.param({"NEURON_STANDIN_DEVICE_TIME": "cpu"}, 0.0, "warning: ", "pytorch issue 166205", id="host-side"),
    pytest.param({}, 0.0, "warning: ", "torch-neuronx fed no device activity back", id="nothing-fed-back"),
    pytest.param({"NEURON_STANDIN_DEVICE_TIME": "1", "NEURON_STANDIN_FAULT": "unreported_device_time"}, 0.5,
                 "warning: ", "device work that no op of the profile accounts for", id="half-unreported"),
]  # fmt: skip


@pytest.mark.parametrize(("env", "coverage", "tag", "named"), COVERAGE_CASES)
def test_device_time_coverage_against_explorers_total(
    tmp_path: Path, tracking_uri: str, env: dict[str, str], coverage: float, tag: str, named: str | None
) -> None:
    done = run_neuron(tmp_path, "backend=neuron", **env)
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    metrics, tags = run.data.metrics, run.data.tags
    assert metrics[names.NEURON_DEVICE_TIME_COVERAGE] == pytest.approx(coverage)
    assert metrics[names.NEURON_FRAMEWORK_DEVICE_MS] == pytest.approx(
        coverage * metrics[names.NEURON_TOTAL_TIME_SUM] * 1000
    )
    if coverage:  # the device columns are filled: the headline total counts each device event once
        assert metrics[names.DEVICE_SELF_TOTAL_MS] == pytest.approx(metrics[names.NEURON_FRAMEWORK_DEVICE_MS])
    assert tags[names.TAG_NEURON_DEVICE_TIME_COVERAGE].startswith(tag)
    warned = [line for line in done.stdout.splitlines() if "WARNING: device time below 95% covered" in line]
    if named is None:
        assert warned == []
    else:
        (line,) = warned
        assert named in line and named in tags[names.TAG_NEURON_DEVICE_TIME_COVERAGE]


def test_an_explorer_without_parquet_is_read_through_summary_json(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", NEURON_STANDIN_DEVIATE="no_parquet")
    assert done.returncode == 0, done.stderr
    tags = the_run(tracking_uri).data.tags
    assert tags[names.TAG_NEURON_EXPLORER].endswith("neuron-explorer: ok")
    assert tags[names.TAG_NEURON_EXPLORER_SOURCE] == "summary-json"
    assert tags[names.TAG_NEURON_EXPLORER_SCHEMA].startswith("unversioned")


def test_an_unknown_explorer_schema_is_read_through_summary_json(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", NEURON_STANDIN_EXPLORER_SCHEMA="8.0.0")
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    assert run.info.status == "FINISHED" and "Traceback" not in done.stderr + done.stdout
    (line,) = [line for line in done.stdout.splitlines() if "neuron-explorer's Parquet is not read" in line]
    assert "Metadata.parquet: profile schema 8.0.0 is not one the runner reads" in line
    assert line.endswith("): its summary-json is")
    assert run.data.tags[names.TAG_NEURON_EXPLORER_SOURCE] == "summary-json"
    assert run.data.metrics[names.NEURON_TOTAL_TIME_SUM] > 0
    assert run.data.tags[names.TAG_NEURON_DEVICE_TIME_COVERAGE].startswith("warning: ")


def test_a_capture_without_a_device_profile_does_not_run_explorer(tmp_path: Path, tracking_uri: str) -> None:
    # profiler=neuron_system captures no DEVICE profile; a stand-in Explorer that ran would fail
    done = run_neuron(tmp_path, "backend=neuron", "profiler=neuron_system", NEURON_STANDIN_EXPLORER="fail")
    assert done.returncode == 0, done.stderr
    tags = the_run(tracking_uri).data.tags
    assert tags[names.TAG_NEURON_EXPLORER] == "not run: the capture holds no device profile (no NTFF beside its NEFF)"
    assert tags[names.TAG_NEURON_EXPLORER_SOURCE] == "none"
    assert tags[names.TAG_NEURON_DEVICE_TIME_COVERAGE].startswith("unknown: ")


def test_auto_prefers_neuron_and_correlate_is_passed_when_accepted(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=auto", "profiler.correlate_device_time=true", NEURON_STANDIN_CORRELATE="1")
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    assert run.data.tags[names.TAG_BACKEND] == "neuron" and run.data.tags[names.TAG_BACKEND_REQUESTED] == "auto"
    assert run.data.tags[names.TAG_NEURON_CORRELATE] == "passed"
    (config,) = [e for e in calls(tmp_path) if e["event"] == "NeuronConfig"]
    assert config["correlate_device_time"] is True and config["capture_enabled_for_nc"] == "0"


def test_correlate_is_dropped_when_the_build_rejects_it(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "profiler.correlate_device_time=true")
    assert done.returncode == 0, done.stderr
    assert the_run(tracking_uri).data.tags[names.TAG_NEURON_CORRELATE] == "unsupported by this torch-neuronx"


def test_memory_snapshot_records_torch_neurons_history_over_the_window(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "measure.memory_snapshot=true")
    assert done.returncode == 0, done.stderr
    order = [e["event"] for e in calls(tmp_path)]
    started, dumped = order.index("record_memory_history"), order.index("dump_snapshot")
    # recording brackets the profiled window (its profiler steps), the dump comes after a synchronize
    assert started < order.index("profiler_step") and dumped > len(order) - 1 - order[::-1].index("profiler_step")
    assert order[dumped - 1] == "synchronize" and order[dumped + 1] == "record_memory_history"
    stop = calls(tmp_path)[dumped + 1]
    assert stop["enabled"] is None and calls(tmp_path)[dumped]["recording"] is True
    run = the_run(tracking_uri)
    assert run.data.tags[names.TAG_MEMORY_SOURCE] == "torch.neuron.memory snapshot"
    assert run.data.metrics[names.MEMORY_WINDOW_PEAK_MB] == 3  # the stand-in's history: 2 + 1 MiB live at once
    table = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/{names.MEMORY_SITES_FILE}")
    assert table["data"] == [["workloads/standin.py:10 forward", 2 * 2**20], ["workloads/standin.py:11 forward", 2**20]]
    assert f"{names.MEMORY_FOLDER}/{names.MEMORY_SNAPSHOT_FILE}" in artifact_files(tracking_uri, run.info.run_id)
    assert "held by the profiled window's allocations, from torch.neuron.memory snapshot" in done.stdout


def test_memory_snapshot_without_torch_neurons_history_reads_the_profilers_events(
    tmp_path: Path, tracking_uri: str
) -> None:
    done = run_neuron(
        tmp_path, "backend=neuron", "measure.memory_snapshot=true", NEURON_STANDIN_DEVIATE="no_memory_snapshot"
    )
    assert done.returncode == 0, done.stderr
    assert "record_memory_history" not in [e["event"] for e in calls(tmp_path)]
    run = the_run(tracking_uri)
    assert run.data.tags[names.TAG_MEMORY_SOURCE] == "profiler memory events"
    assert run.data.metrics[names.MEMORY_WINDOW_PEAK_MB] > 0
    assert "held by the profiled window's allocations, from profiler memory events" in done.stdout


@pytest.mark.parametrize(
    ("args", "env", "standin", "message"),
    [
        pytest.param([], {}, False, "backend=neuron needs torch-neuronx", id="no-torch-neuronx"),
        pytest.param(["backend.cores=0-x"], {}, True, "backend.cores='0-x' is not a core spec", id="bad-spec"),
        pytest.param(["backend.cores=6-9"], {}, True, "NeuronCore(s) 8-9 do not exist here; this job can use 0-7",
                     id="no-such-cores"),
        pytest.param(["backend.cores=2"], {"NEURON_RT_VISIBLE_CORES": "0-1"}, True,
                     "NeuronCore(s) 2 are not in NEURON_RT_VISIBLE_CORES=0-1; this job can use 0-1", id="not-visible"),
        pytest.param(["backend.cores='0,2-3'"], {}, True,
                     "backend.cores='0,2-3' is not one contiguous range of NeuronCores", id="not-contiguous"),
        pytest.param([], {"NEURON_RT_INSPECT_ENABLE": "1"}, True, "NEURON_RT_INSPECT_ENABLE=1 is set", id="inspect"),
        pytest.param(["measure.processes=2"], {}, True, "measure.processes=2: a NeuronCore serves one process",
                     id="worker-processes"),
        pytest.param(["measure.copies=3", "backend.cores=0-1"], {}, True,
                     "measure.copies=3: neuron has 2 share(s) to run them on (NeuronCores 0; NeuronCores 1)",
                     id="copies"),
    ],
)  # fmt: skip
def test_neuron_refusals_are_one_line(
    tmp_path: Path, tracking_uri: str, args: list[str], env: dict[str, str], standin: bool, message: str
) -> None:
    done = run_neuron(tmp_path, "backend=neuron", *args, standin=standin, **env)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr
    assert all_runs(tracking_uri) == []


def test_compile_uses_the_backends_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def fake_compile(module: torch.nn.Module, **kwargs: Any) -> torch.nn.Module:
        seen.update(kwargs)
        return module

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr(CpuBackend, "traits", NeuronBackend.traits)
    backend = CpuBackend(BackendConfig(name="cpu"))
    build_workload(load_run_spec(compose_cfg("+workload=rmsnorm_compiled")).workload, backend)
    assert seen == {"backend": "neuron"}


def test_parallel_jobs_on_auto_each_own_their_cores(tmp_path: Path, tracking_uri: str) -> None:
    # the runtime reserves every visible core for the process that starts it: unpinned
    # concurrent jobs would fail at runtime start (the stand-in enforces this)
    done = run_neuron(
        tmp_path, "-m", "workload.seed=0,1", "backend=auto", "profiler=neuron_system", "hydra/launcher=parallel",
        "hydra.launcher.jobs=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert [r.info.status for r in runs] == ["FINISHED", "FINISHED"]
    starts = [e["visible_cores"] for e in calls(tmp_path) if e["event"] == "runtime_start"]
    assert sorted(starts) == ["0", "1"]
    assert {r.data.tags[names.TAG_PLACEMENT].rsplit(" ", 1)[-1] for r in runs} == {"0", "1"}
    # the share is a tag and an environment variable, never a rewrite of the job's config
    # backend=auto has no Neuron keys: the slots pin the jobs, never a backend.cores
    assert all("backend.cores" not in r.data.params and "backend.cores" not in r.info.run_name for r in runs)


def test_copies_each_get_a_core_of_the_job_before_the_job_starts_the_runtime(tmp_path: Path, tracking_uri: str) -> None:
    # the runtime reserves every visible core for the process that starts it (the stand-in
    # enforces this): the copies must start theirs before the job's process touches the device
    done = run_neuron(tmp_path, "backend=neuron", "backend.cores=0-1", "measure.copies=2", "profiler=neuron_system")
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    assert run.info.status == "FINISHED" and run.data.metrics[names.SCALING_COPIES] == 2
    assert run.data.metrics[names.SCALING_THROUGHPUT] > 0
    starts = [e["visible_cores"] for e in calls(tmp_path) if e["event"] == "runtime_start"]
    assert sorted(starts[:2]) == ["0", "1"] and starts[2:] == ["0-1"]  # the copies, then the job itself
    assert "steady state: 2 copies at once (NeuronCores 0; NeuronCores 1)" in done.stdout


def runtime_of_a_forked_child() -> tuple[bool, bool]:
    """Whether the runtime had started when this child began, and whether it starts here."""
    started = torch.neuron.is_initialized()  # type: ignore[attr-defined]
    torch.ones(1).to("neuron")  # refused in a child forked after its parent started the runtime
    return started, torch.neuron.is_initialized()  # type: ignore[attr-defined]


def test_the_fork_server_starts_no_runtime_and_its_children_start_their_own(tmp_path: Path) -> None:
    code = (
        "from runner.execute.processes import Child\n"
        "from tests.system.test_neuron_backend import runtime_of_a_forked_child as probe\n"
        "with Child('copy', probe, env={'NEURON_RT_VISIBLE_CORES': '1'}, start_method='forkserver') as child:\n"
        "    print(child.result())\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=neuron_host(tmp_path), capture_output=True, text=True, timeout=300
    )
    assert done.stdout == "(False, True)\n", done.stderr
    # the server's `import torch` loaded the stand-in (its import logged), and only the child started a runtime
    events = [e["event"] for e in calls(tmp_path)]
    assert events.count("import") >= 2 and events.count("runtime_start") == 1
    assert [e["visible_cores"] for e in calls(tmp_path) if e["event"] == "runtime_start"] == ["1"]


def test_the_fork_server_preloads_no_compiler_where_a_device_runtime_is_installed(tmp_path: Path) -> None:
    """On an H200 the compiler the server preloaded asked CUDA for its devices: every worker forked after failed.

    torch-neuronx is installed here (the stand-in, not autoloaded: the CPU job compiles for the CPU).
    """
    witness = tmp_path / "forks.jsonl"
    env = neuron_host(tmp_path, RUNNER_FORK_WITNESS=str(witness), TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    env["PYTHONPATH"] = os.pathsep.join([str(STANDIN), str(HELPERS / "fork_witness")])
    cmd = [sys.executable, "-m", "runner", "+workload=rmsnorm_compiled", "workload.hidden=16", "workload.seq_len=2",
           "measure=quick", "measure.processes=1", "profiler=none", "backend=cpu"]  # fmt: skip
    done = subprocess.run([*cmd, f"hydra.run.dir={tmp_path}/run"], cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    forks = [json.loads(line) for line in witness.read_text().splitlines()]
    assert [fork for fork in forks if fork["fork_server"]]  # the worker was forked from the server
    assert not [fork for fork in forks if fork["cuda_initialized"] or fork["neuron_runtime"]]
    assert not [fork for fork in forks if fork["fork_server"] and fork["compiler"]]


def test_the_core_scaling_study_runs_on_neuron(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(
        tmp_path, "-m", "+experiment=core_scaling", "backend=neuron", "backend.cores=0-1", "measure.copies=1,2",
        "profiler=neuron_system",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = all_runs(tracking_uri)
    (parent,) = [r for r in runs if r.data.tags.get(names.TAG_SWEEP) == "true"]
    jobs = [r for r in runs if r is not parent]
    assert sorted(r.data.metrics[names.SCALING_COPIES] for r in jobs) == [1, 2]
    starts = [e["visible_cores"] for e in calls(tmp_path) if e["event"] == "runtime_start"]
    assert starts[:2] == ["0", "0-1"] and sorted(starts[2:4]) == ["0", "1"] and starts[4:] == ["0-1"]
    client = mlflow.MlflowClient(tracking_uri)
    report = Path(client.download_artifacts(parent.info.run_id, names.SCALING_FILE)).read_text()
    assert report.startswith("rmsnorm_naive:") and "| 2 |" in report


def test_ranks_each_own_a_neuron_core_and_their_own_capture(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(
        tmp_path, "backend=neuron", "backend.cores=0-1", "distributed.ranks=2", "workload.mode=train_step",
        "profiler=neuron_system",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    assert run.info.status == "FINISHED" and run.data.metrics[names.RANKS] == 2
    events = calls(tmp_path)
    assert sorted(e["visible_cores"] for e in events if e["event"] == "runtime_start") == ["0", "1"]
    assert sorted(e["rank"] for e in events if e["event"] == "process_group") == [0, 1]
    outputs = sorted(e["profile_output_dir"] for e in events if e["event"] == "NeuronConfig")
    assert [Path(out).parts[-2:] for out in outputs] == [
        ("rank0", names.NEURON_PROFILE_FOLDER),
        ("rank1", names.NEURON_PROFILE_FOLDER),
    ]
    assert f"rank1/{names.NEURON_PROFILE_FOLDER}" in {
        info.path for info in mlflow.MlflowClient(tracking_uri).list_artifacts(run.info.run_id, "rank1")
    }


def test_ranks_on_cores_of_one_chip_get_no_fraction_of_the_chip_to_chip_link(tmp_path: Path, tracking_uri: str) -> None:
    # cores 0 and 1 of a Trn2 chip (4 per chip): the ranks never cross NeuronLink
    done = run_neuron(
        tmp_path, "backend=neuron", "backend.cores=0-1", "distributed.ranks=2", "measure.peak=trn2_core",
        "profiler=none", workload=("+workload=allreduce", "workload.megabytes=0.01"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    assert names.COLLECTIVE_BUSBW_GBPS in run.data.metrics
    assert names.COLLECTIVE_BUSBW_LINK_FRACTION not in run.data.metrics
    assert run.data.tags[names.TAG_COLLECTIVE_LINK] == "intra-chip: no documented figure"
    assert "[intra-chip: no documented figure]" in done.stdout


def test_cold_and_warm_neff_caches_differ_in_their_hits_and_misses(tmp_path: Path, tracking_uri: str) -> None:
    # the stand-in compiles its NEFFs into the cache a DEVICE capture copies them from
    cache = f"measure.compile_cache_dir={tmp_path / 'cache'}"
    for state in ("cold", "warm"):
        done = run_neuron(tmp_path / state, "backend=neuron", f"measure.compile_cache={state}", cache)
        assert done.returncode == 0, done.stderr
    jobs = {run.data.tags[names.TAG_COMPILE_CACHE]: run.data for run in all_runs(tracking_uri)}
    cold, warm = jobs["cold"].metrics, jobs["warm"].metrics
    assert (cold[names.COMPILE_CACHE_HITS], cold[names.COMPILE_CACHE_MISSES]) == (0, 2)
    assert (warm[names.COMPILE_CACHE_HITS], warm[names.COMPILE_CACHE_MISSES]) == (2, 0)
    assert jobs["warm"].tags[names.TAG_COMPILE_CACHE_COUNTED].startswith("NEFF cache: misses are NEFFs")


def test_a_cold_job_compiles_though_torchneurons_own_caches_hold_its_graphs(tmp_path: Path, tracking_uri: str) -> None:
    # both jobs on one host: TorchNeuron's HLO and local NEFF caches, unmoved, would keep the first's graphs
    host = {"NEURON_STANDIN_STATE": str(tmp_path / "host")}
    for job in ("first", "second"):
        cache = f"measure.compile_cache_dir={tmp_path / job / 'cache'}"
        done = run_neuron(tmp_path / job, "backend=neuron", "measure.compile_cache=cold", cache, **host)
        assert done.returncode == 0, done.stderr
    served = [call["served"] for call in calls(tmp_path / "second") if call["event"] == "compile"]
    assert served and served == [None] * len(served)  # each compiled: none served warm by a cache
    assert not (tmp_path / "host" / "hlo_cache").exists()
    assert sorted(p.name for p in (tmp_path / "second" / "cache").iterdir()) == [
        "hlo", "inductor", "neff", "neff_local", "neuron_compile_cache", "triton"
    ]  # fmt: skip


def device_facts(uri: str) -> dict[str, Any]:
    """The device part of the latest run's environment.json."""
    latest = max(all_runs(uri), key=lambda r: r.info.start_time)
    path = mlflow.MlflowClient(uri).download_artifacts(latest.info.run_id, "environment.json")
    return dict(json.loads(Path(path).read_text())["device"])


ASYNC_FACT = "neuron.env.TORCH_NEURONX_ENABLE_ASYNC_NRT"
INFLIGHT_FACT = "neuron.env.NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS"


def test_async_runtime_is_set_before_the_runtime_starts_and_recorded(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "backend.async_runtime=false", "measure.mode=throughput",
                      "measure.inflight=4", "profiler=neuron_system")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (start,) = [e for e in calls(tmp_path) if e["event"] == "runtime_start"]
    assert (start["async_nrt"], start["inflight_requests"]) == ("0", None)
    facts = device_facts(tracking_uri)
    assert facts[ASYNC_FACT] == "0 (backend config)" and INFLIGHT_FACT not in facts
    run = the_run(tracking_uri)
    assert run.data.metrics[names.THROUGHPUT_INFLIGHT] == 4 and run.data.metrics[names.THROUGHPUT_STEPS_PER_S] > 0


@pytest.mark.parametrize("launcher", ["inprocess", "isolated"])
def test_the_async_default_is_torch_neuronx_s_when_the_user_set_nothing(
    tmp_path: Path, tracking_uri: str, launcher: str
) -> None:
    # torch-neuronx autoloads at `import torch` and sets the variable; the isolated launcher's job
    # process inherits the environment of a sweep process that imported torch already
    args = ["-m", "workload.seed=0"] if launcher == "isolated" else []
    done = run_neuron(tmp_path, *args, "backend=neuron", "profiler=neuron_system", f"hydra/launcher={launcher}")
    assert done.returncode == 0, done.stderr
    events = calls(tmp_path)
    (start,) = [e for e in events if e["event"] == "runtime_start"]
    assert start["async_nrt"] == "1" and "autoload" in [e["event"] for e in events]
    assert device_facts(tracking_uri)[ASYNC_FACT] == "1 (set by torch-neuronx at import; documented default 0)"


def test_the_users_async_setting_and_a_removed_variable_are_told_apart(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "profiler=neuron_system",
                      TORCH_NEURONX_ENABLE_ASYNC_NRT="0", NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS="4")  # fmt: skip
    assert done.returncode == 0, done.stderr
    (start,) = [e for e in calls(tmp_path) if e["event"] == "runtime_start"]
    assert start["async_nrt"] == "0"
    facts = device_facts(tracking_uri)
    assert facts[ASYNC_FACT] == "0 (environment)"
    assert facts[INFLIGHT_FACT] == "4 (environment; enables nothing since Neuron SDK 2.31)"
    console = (done.stdout + done.stderr).splitlines()
    (warning,) = [line for line in console if "NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS=4" in line]
    assert "enables nothing since Neuron SDK 2.31" in warning and "measure.inflight" in warning


def test_parallel_launcher_refuses_a_single_jobs_pin(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(
        tmp_path, "-m", "workload.seed=0,1", "backend=neuron", "backend.cores=0-1", "hydra/launcher=parallel"
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "backend.cores=0-1 pins a single job; with several jobs at once give the cores to share" in done.stderr
    assert [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) != "true"] == []


def test_isolated_launcher_keeps_backend_cores(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "-m", "workload.seed=0,1", "backend=neuron", "backend.cores=0-1",
                      "profiler=neuron_system", "hydra/launcher=isolated")  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert len(runs) == 2 and all(r.data.params["backend.cores"] == "0-1" for r in runs)
    assert all(r.info.run_name.count("backend.cores") == 1 and "0-0" not in r.info.run_name for r in runs)
    assert [e["visible_cores"] for e in calls(tmp_path) if e["event"] == "runtime_start"] == ["0-1", "0-1"]


def test_a_neuron_sweep_times_its_jobs_in_rounds_each_worker_with_the_cores_to_itself(
    tmp_path: Path, tracking_uri: str
) -> None:
    """The sweep's process never starts the runtime: each round worker claims the job's core, then the jobs do."""
    done = run_neuron(tmp_path, "-m", "workload.seed=0,1", "backend=neuron", "backend.cores=0",
                      "profiler=neuron_system", "measure.processes=null")  # fmt: skip
    assert done.returncode == 0, done.stderr
    runs = [r for r in all_runs(tracking_uri) if r.data.tags.get(names.TAG_SWEEP) != "true"]
    assert len(runs) == 2 and len({r.data.tags[names.TAG_ROUNDS_ID] for r in runs}) == 1
    client = mlflow.MlflowClient(tracking_uri)
    for run in runs:
        assert len(client.get_metric_history(run.info.run_id, names.PROCESS_MEDIAN_MS)) == 3
    events = [e["event"] for e in calls(tmp_path) if e["event"].startswith("runtime_start")]
    # two first calls and 2 x 3 round workers, each claiming core 0 in its own process and letting it go at
    # exit, then the jobs in the sweep's process (one runtime for both, under the in-process launcher): no claim failed
    assert events == ["runtime_start"] * 9


def test_an_lnc_the_runtime_does_not_take_is_refused_before_anything_runs(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", NEURON_LOGICAL_NC_CONFIG="4")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    refusal = "error: NEURON_LOGICAL_NC_CONFIG='4' is not allowed; choose one of: 1, 2"
    assert done.stderr.strip().splitlines()[-1] == refusal
    assert all_runs(tracking_uri) == [] and not (tmp_path / "run").exists()
    assert not [c for c in calls(tmp_path) if c["event"] == "runtime_start"]


def test_roofline_counts_the_one_core_the_work_runs_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("runner.backends.neuron.instance_type", lambda: "trn2.48xlarge")
    backend = NeuronBackend.__new__(NeuronBackend)  # no torch-neuronx in this process: skip __init__
    backend.config, backend.cores = NeuronBackendConfig(cores="0-1"), [0, 1]
    assert backend.peak("bfloat16") == datasheet_peak("trn2_core", 1, "bfloat16")
