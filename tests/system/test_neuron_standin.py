"""The torch-neuronx stand-in enforces what the Neuron documentation says (reference section 10).

Each case runs in a subprocess: importing the stand-in renames PyTorch's PrivateUse1 backend for
the whole process, and the runtime's core reservation is per process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import STANDIN

pytestmark = pytest.mark.slow
START = "import torch, torch_neuronx; torch.ones(1).to('neuron')"
# starts the runtime, says so, then holds it until its stdin closes
HOLD = "import sys, torch, torch_neuronx; torch.ones(1).to('neuron'); print('ready', flush=True); sys.stdin.read()"
IN_USE = (
    "(reserved by the process that started the runtime; pin each process to its own cores with NEURON_RT_VISIBLE_CORES)"
)


def environ(tmp_path: Path, visible: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEURON_", "PYTHONPATH"))}
    env.update(PYTHONPATH=str(STANDIN), NEURON_STANDIN_STATE=str(tmp_path / "state"))
    env["NEURON_STANDIN_LOG"] = str(tmp_path / f"calls_{visible}.jsonl")
    if visible is not None:
        env["NEURON_RT_VISIBLE_CORES"] = visible
    return env


def python(tmp_path: Path, code: str, visible: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], env=environ(tmp_path, visible), capture_output=True, text=True, timeout=60
    )


@contextmanager
def holding(tmp_path: Path, visible: str) -> Iterator[subprocess.Popen[str]]:
    """A live process whose runtime owns `visible`; it exits when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD],
        env=environ(tmp_path, visible),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n", proc.communicate()[1]
        yield proc
    finally:
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err


def events(tmp_path: Path, visible: str | None) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / f"calls_{visible}.jsonl").read_text().splitlines()]


def claims(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "state").glob("nc_*.owner"))


def test_a_live_process_reserves_its_cores(tmp_path: Path) -> None:
    with holding(tmp_path, "0-1") as first:
        assert claims(tmp_path) == ["nc_0.owner", "nc_1.owner"]
        assert (tmp_path / "state" / "nc_0.owner").read_text().strip() == str(first.pid)
        second = python(tmp_path, START, "0-1")
        assert second.returncode != 0
        message = f"RuntimeError: NRT: nrt_init failed: NeuronCore 0 is in use by process {first.pid} {IN_USE}"
        assert message in second.stderr
        failed = [e for e in events(tmp_path, "0-1") if e["event"] == "runtime_start_failed"]
        assert len(failed) == 1 and f"process {first.pid}" in failed[0]["error"]
        assert claims(tmp_path) == ["nc_0.owner", "nc_1.owner"]
    # released at exit: the same cores are free again
    assert claims(tmp_path) == []
    assert python(tmp_path, START, "0-1").returncode == 0


def test_a_failed_start_releases_what_it_claimed(tmp_path: Path) -> None:
    with holding(tmp_path, "1") as first:
        second = python(tmp_path, START, "0-1")
        assert second.returncode != 0 and f"NeuronCore 1 is in use by process {first.pid}" in second.stderr
        assert claims(tmp_path) == ["nc_1.owner"]  # core 0 was claimed, then given back


def test_processes_pinned_to_their_own_cores_both_start(tmp_path: Path) -> None:
    with holding(tmp_path, "0"):
        done = python(tmp_path, START, "1")
        assert done.returncode == 0, done.stderr
    (start,) = [e for e in events(tmp_path, "1") if e["event"] == "runtime_start"]
    assert (start["visible_cores"], start["cores"]) == ("1", [1])


def test_unpinned_processes_collide(tmp_path: Path) -> None:
    with holding(tmp_path, None):
        assert len(claims(tmp_path)) == 8
        second = python(tmp_path, START)
        assert second.returncode != 0 and "NeuronCore 0 is in use by process" in second.stderr


def test_a_dead_process_claim_is_taken_over(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "nc_0.owner").write_text(gone.stdout)
    done = python(tmp_path, START, "0")
    assert done.returncode == 0, done.stderr
    assert claims(tmp_path) == []


@pytest.mark.parametrize(
    ("visible", "ok"),
    [("0,2-3", False), ("3,5,6", False), ("3,4,5", True), ("2-5", True), ("4", True)],
)
def test_visible_cores_must_be_contiguous(tmp_path: Path, visible: str, ok: bool) -> None:
    done = python(tmp_path, START, visible)
    assert (done.returncode == 0) is ok, done.stderr
    if not ok:
        assert f"NRT: nrt_init failed: NEURON_RT_VISIBLE_CORES={visible!r} is not contiguous" in done.stderr
        assert "the resulting range must be contiguous" in done.stderr
        # `import torch` autoloads the stand-in (its torch.backends entry point) before the script starts it
        assert [e["event"] for e in events(tmp_path, visible)] == ["import", "autoload", "runtime_start_failed"]
        assert claims(tmp_path) == []


def test_a_child_forked_after_the_runtime_started_cannot_use_it(tmp_path: Path) -> None:
    code = """
import os, torch, torch_neuronx
def fork_and_start():
    pid = os.fork()
    if pid == 0:
        try:
            torch.ones(1).to("neuron")
        except RuntimeError as err:
            print(err, flush=True)
            os._exit(1)
        os._exit(0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
before = fork_and_start()  # forked before the runtime started: it starts its own
torch.ones(1).to("neuron")
print(before, fork_and_start())
"""
    done = python(tmp_path, code, "0")
    assert done.returncode == 0, done.stderr
    refused = "Cannot re-initialize Neuron runtime in forked subprocess. To use Neuron with multiprocessing, you must"
    assert done.stdout.startswith(refused) and done.stdout.endswith("\n0 1\n")


def test_device_count_is_cached_and_starts_nothing(tmp_path: Path) -> None:
    code = """
import glob, os, torch, torch_neuronx
before = (torch.neuron.is_available(), torch.neuron.device_count(), torch.neuron.is_initialized())
claims = glob.glob(os.path.join(os.environ["NEURON_STANDIN_STATE"], "nc_*"))
os.environ["NEURON_RT_VISIBLE_CORES"] = "0-1"
torch.ones(1).to("neuron")
print(before, claims, torch.neuron.device_count(), torch.neuron.is_initialized())
"""
    done = python(tmp_path, code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[0] == "(True, 8, False) [] 8 True"
    # read after pinning, it counts the pinned cores
    pinned = python(tmp_path, "import torch, torch_neuronx; print(torch.neuron.device_count())", "2-4")
    assert pinned.stdout.strip() == "3"


PROFILE = """
import sys, torch, torch_neuronx
from torch.profiler import ProfilerActivity, profile
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode
capture = sys.argv[2] if sys.argv[2] != "-" else None
config = NeuronConfig(modes=[ProfileMode.DEVICE], capture_enabled_for_nc=capture, profile_output_dir=sys.argv[1])
x = torch.ones(4).to("neuron")
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], experimental_config=config,
             on_trace_ready=NeuronProfiler(config).export_trace):
    (x * 2).sum()
"""


@pytest.mark.parametrize(
    ("visible", "capture", "expected"),
    [
        pytest.param("0-1", "0-1", {0: True, 1: False}, id="pinned-0-1"),
        pytest.param("4-6", None, {0: True, 1: False, 2: False}, id="default-captures-all-owned"),
        pytest.param("2-3", "1,5", {1: False}, id="relative-and-past-owned-ignored"),
    ],
)
def test_idle_owned_cores_give_empty_ntffs(
    tmp_path: Path, visible: str, capture: str | None, expected: dict[int, bool]
) -> None:
    out = tmp_path / "profile"
    done = subprocess.run(
        [sys.executable, "-c", PROFILE, str(out), capture or "-"],
        env=environ(tmp_path, visible),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    ntffs = {int(p.name.split("_")[2]): p.stat().st_size > 0 for p in out.rglob("*.ntff")}
    assert ntffs == expected
    assert all(p.name.endswith("_session_0.ntff") for p in out.rglob("*.ntff"))


@pytest.mark.parametrize(
    ("env", "seen"),
    [
        pytest.param({}, "True 1", id="autoload-sets-the-default"),
        pytest.param({"TORCH_NEURONX_ENABLE_ASYNC_NRT": "0"}, "True 0", id="user-value-kept"),
        pytest.param({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, "False None", id="autoload-off"),
    ],
)
def test_import_torch_autoloads_the_standin_as_the_real_package(tmp_path: Path, env: dict[str, str], seen: str) -> None:
    environment = {k: v for k, v in environ(tmp_path, None).items() if not k.startswith("TORCH_")}
    code = "import os, sys, torch; print('torch_neuronx' in sys.modules, os.getenv('TORCH_NEURONX_ENABLE_ASYNC_NRT'))"
    done = subprocess.run(
        [sys.executable, "-c", code], env={**environment, **env}, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == seen
