"""backend=neuron end to end against the torch-neuronx stand-in (tests/neuron_standin).

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

from runner.backends import CpuBackend
from runner.build import build_workload
from runner.config import BackendConfig, load_run_spec
from runner.neuron import NeuronBackend
from tests.conftest import REPO, all_runs, compose_cfg

pytestmark = pytest.mark.slow
STANDIN = REPO / "tests" / "neuron_standin"
SECRET = "do-not-leak-4f2a"


def run_neuron(tmp_path: Path, *args: str, standin: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "PYTHONPATH"))}
    environ.update(env, NEURON_STANDIN_LOG=str(tmp_path / "calls.jsonl"))
    if standin:
        environ["PYTHONPATH"] = str(STANDIN)
        environ["PATH"] = f"{STANDIN / 'bin'}{os.pathsep}{environ['PATH']}"
    cmd = [
        sys.executable, "-m", "runner", "+workload=rmsnorm_naive", "workload.hidden=16", "workload.seq_len=2",
        f"hydra.run.dir={tmp_path / 'run'}", f"backend.neff_cache_dir={tmp_path / 'neff_cache'}", *args,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=environ, capture_output=True, text=True)


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
    names = [e["event"] for e in events]

    # the runtime started already pinned to the requested cores
    assert events[names.index("runtime_start")]["visible_cores"] == "0-1"
    # NeuronConfig exactly as documented, capture defaulting to the job's cores, NEFFs beside traces
    (config,) = [e for e in events if e["event"] == "NeuronConfig"]
    assert config == {
        "event": "NeuronConfig",
        "modes": ["DEVICE", "RUNTIME"],
        "max_events_per_nc": None,
        "capture_enabled_for_nc": "0-1",
        "profile_output_dir": str(tmp_path / "run" / "neuron_profile"),
        "neff_cache_dir": str(tmp_path / "neff_cache"),
        "precache_node_info": True,
    }
    # CPU + PrivateUse1 (named NEURON once renamed); export_trace as on_trace_ready
    (export,) = [e for e in events if e["event"] == "export_trace"]
    assert export["activities"] == ["ProfilerActivity.CPU", "ProfilerActivity.NEURON"]
    # a synchronize right before every profiler step: 2 wait + 1 warmup + 1 active
    steps = [i for i, name in enumerate(names) if name == "profiler_step"]
    assert len(steps) == 4 and all(names[i - 1] == "synchronize" for i in steps)

    run = the_run(tracking_uri)
    assert run.info.status == "FINISHED"
    tags, metrics = run.data.tags, run.data.metrics
    assert tags["runner.backend"] == "neuron" and tags["neuron.capture"] == "ok"
    assert tags["neuron.explorer"] == "neuron-explorer: ok"
    assert tags["runner.device_time"].startswith("absent")
    assert "device/self_total_ms" not in metrics
    assert metrics["neuron/capture_ok"] == 1 and metrics["neuron/ntff_files"] == 2 and metrics["neuron/neff_files"] == 2
    assert metrics["neuron/total_time"] > 0 and metrics["neuron/mfu_estimated_percent"] == 1.5
    assert tags["env.NEURON_RT_VISIBLE_CORES"] == "0-1" and tags["env.NEURON_RT_LOG_LEVEL"] == "INFO"
    # new NEFFs in the cache count as compilations; memory comes from max_memory_allocated()
    assert metrics["compile/neffs_new"] == 2 and metrics["memory/peak_device_mb"] == 2
    assert "time/step_median_ms" in metrics and tags["accuracy.check"] == "pass"

    files = artifact_files(tracking_uri, run.info.run_id)
    capture = [f for f in files if f.startswith("neuron_profile/")]
    session = {str(Path(f).parent) for f in capture}
    assert len(session) == 1 and "_pid_" in next(iter(session))
    assert {Path(f).name for f in capture} == {
        "ntrace.pb", "trace_info.pb", "trace.json", "profile_nc_0_session_0.ntff", "profile_nc_1_session_0.ntff",
        "neff_1438288577794338_vnc_0.neff", "neff_9911002233445566_vnc_0.neff",
    }  # fmt: skip
    manifest = mlflow.artifacts.load_dict(f"runs:/{run.info.run_id}/environment.json")
    assert manifest["device"]["neuron.core_count"] == 2 and manifest["packages"]["torch"]

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
    assert run.data.tags["neuron.capture"] == "warning"
    problems = run.data.tags["neuron.capture_problems"]
    assert "zero-byte NTFF" in problems and "no .neff" in problems and "1234 trace events were dropped" in problems
    assert run.data.metrics["neuron/capture_ok"] == 0 and run.data.metrics["neuron/dropped_events"] == 1234
    assert run.data.tags["neuron.explorer"].startswith("neuron-explorer failed")


def test_auto_prefers_neuron_and_correlate_is_passed_when_accepted(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=auto", "profiler.correlate_device_time=true", NEURON_STANDIN_CORRELATE="1")
    assert done.returncode == 0, done.stderr
    run = the_run(tracking_uri)
    assert run.data.tags["runner.backend"] == "neuron" and run.data.tags["runner.backend_requested"] == "auto"
    assert run.data.tags["neuron.correlate_device_time"] == "passed"
    (config,) = [e for e in calls(tmp_path) if e["event"] == "NeuronConfig"]
    assert config["correlate_device_time"] is True and config["capture_enabled_for_nc"] == "0"


def test_correlate_is_dropped_when_the_build_rejects_it(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "backend=neuron", "profiler.correlate_device_time=true")
    assert done.returncode == 0, done.stderr
    assert the_run(tracking_uri).data.tags["neuron.correlate_device_time"] == "unsupported by this torch-neuronx"


@pytest.mark.parametrize(
    ("args", "env", "standin", "message"),
    [
        pytest.param([], {}, False, "backend=neuron needs torch-neuronx", id="no-torch-neuronx"),
        pytest.param(["backend.cores=0-x"], {}, True, "backend.cores='0-x' is not a core spec", id="bad-spec"),
        pytest.param(["backend.cores=6-9"], {}, True, "NeuronCore(s) 8-9 do not exist here; this job can use 0-7",
                     id="no-such-cores"),
        pytest.param([], {"NEURON_RT_INSPECT_ENABLE": "1"}, True, "NEURON_RT_INSPECT_ENABLE=1 is set", id="inspect"),
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
    backend = CpuBackend(BackendConfig(name="cpu"))
    backend.compile_backend = NeuronBackend.compile_backend
    build_workload(load_run_spec(compose_cfg("+workload=rmsnorm_compiled")).workload, backend)
    assert seen == {"backend": "neuron"}
