"""The one way the runner starts a child process: its answer, its error, its death, its stop.

Each behaviour holds for both start methods (`start_method`): a spawned child and one forked
from the fork server. The targets are tiny functions of this module (a child imports them by
name), so a spawned child costs an interpreter start and no torch; the fork server, started once
per test process, imports torch once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from runner.doctor.probe import FreshProcess, ProcessFailed
from runner.execute import processes
from runner.execute.processes import (
    FORK_SERVER_PRELOAD,
    Child,
    ChildDied,
    ChildRaised,
    ChildSilent,
    StartMethod,
    answered,
    stop,
)
from tests.helpers import REPO


def environment_seen(*names: str) -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in names}


def raises() -> None:
    raise ValueError("bad input")


def dies() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def hangs() -> None:
    time.sleep(60)


def ignores_terminate() -> str:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return "ready"


def interrupts_ignored() -> bool:
    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def leaves_a_mark() -> dict[str, object]:
    """What a child finds of an earlier child's state, then leaves some of its own: a module global, a heap block."""
    import torch  # the fork server's: this module imports no torch

    found = {"pid": os.getpid(), "mark": getattr(torch, "_left_by_a_child", None), "cuda": torch.cuda.is_initialized()}
    torch._left_by_a_child = torch.full((2**20,), float(os.getpid()))  # type: ignore[attr-defined]
    return found


def preloaded() -> list[str]:
    """The fork server's imports this child has: this module imports none of them."""
    return [name for name in FORK_SERVER_PRELOAD if name in sys.modules]


@pytest.fixture(params=["spawn", "forkserver"])
def start_method(request: pytest.FixtureRequest) -> StartMethod:
    return request.param  # type: ignore[no-any-return]


def test_a_child_returns_its_value_with_its_own_environment(
    monkeypatch: pytest.MonkeyPatch, start_method: StartMethod
) -> None:
    monkeypatch.setenv("REMOVED_FOR_THE_CHILD", "parent's")
    monkeypatch.delenv("SET_FOR_THE_CHILD", raising=False)
    env = {"SET_FOR_THE_CHILD": "child's", "REMOVED_FOR_THE_CHILD": None}
    names = ("SET_FOR_THE_CHILD", "REMOVED_FOR_THE_CHILD")
    with Child("probe", environment_seen, *names, env=env, start_method=start_method) as child:
        assert child.result() == {"SET_FOR_THE_CHILD": "child's", "REMOVED_FOR_THE_CHILD": None}
    assert "SET_FOR_THE_CHILD" not in os.environ and os.environ["REMOVED_FOR_THE_CHILD"] == "parent's"


def test_a_forked_child_has_the_environment_of_now_not_the_servers(monkeypatch: pytest.MonkeyPatch) -> None:
    with Child("first", pow, 2, 3, start_method="forkserver") as first:  # the server runs from here on
        assert first.result() == 8
    monkeypatch.setenv("SET_AFTER_THE_SERVER_STARTED", "now")
    monkeypatch.delenv("HOME", raising=False)  # the server has it
    with Child("probe", environment_seen, "SET_AFTER_THE_SERVER_STARTED", "HOME", start_method="forkserver") as child:
        assert child.result() == {"SET_AFTER_THE_SERVER_STARTED": "now", "HOME": None}


def test_a_forked_child_has_a_fresh_heap_and_no_device_state() -> None:
    seen = []
    for name in ("first", "second"):
        with Child(name, leaves_a_mark, start_method="forkserver") as child:
            seen.append(child.result())
    assert seen[0]["pid"] != seen[1]["pid"]
    assert [found["mark"] for found in seen] == [None, None]  # the first's global and tensor died with it
    assert [found["cuda"] for found in seen] == [False, False]  # the server never initialised CUDA


def test_a_forked_child_finds_torch_the_worker_and_the_workloads_imported() -> None:
    with Child("probe", preloaded, start_method="forkserver") as child:
        assert child.result() == list(FORK_SERVER_PRELOAD)
    with Child("probe", preloaded) as child:  # a spawned one imports only what its target needs
        assert child.result() == []


def test_a_child_that_raises_carries_its_traceback_and_its_error_in_one_line(start_method: StartMethod) -> None:
    with Child("probe", raises, start_method=start_method) as child, pytest.raises(ChildRaised) as raised:
        child.result()
    assert str(raised.value).startswith("probe raised: ValueError: bad input\nTraceback (most recent call last):")
    assert "in raises" in str(raised.value) and raised.value.error == "ValueError: bad input"


def test_a_child_killed_by_a_signal_died_with_its_exit_code(start_method: StartMethod) -> None:
    with (
        Child("probe", dies, start_method=start_method) as child,
        pytest.raises(ChildDied, match=r"^probe died \(exit code -9\)$"),
    ):
        child.result()


def test_a_hung_child_is_silent_past_its_time_then_stopped(start_method: StartMethod) -> None:
    child = Child("probe", hangs, start_method=start_method)
    with pytest.raises(ChildSilent, match=r"^probe gave no answer within 0.2 s$"):
        child.result(timeout_s=0.2)
    assert child.is_alive()
    stop([child])
    assert not child.is_alive()


def test_a_child_that_ignores_terminate_is_killed_after_the_grace_period(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "STOP_GRACE_S", 0.5)
    child = Child("probe", ignores_terminate, hold=True)
    assert child.result() == "ready" and child.is_alive()  # held: alive after its answer
    started = time.monotonic()
    stop([child])
    assert not child.is_alive() and time.monotonic() - started < 5
    with pytest.raises(ChildDied, match=r"exit code -9"):  # killed, not terminated
        child.result()


def test_a_held_child_ends_on_its_own_once_released() -> None:
    child = Child("probe", ignores_terminate, hold=True)
    assert child.result() == "ready"
    child.release()  # its SIGTERM is ignored, so only the release can have ended it
    assert not child.is_alive()


def test_a_child_is_born_ignoring_interrupts_and_the_parent_keeps_its_handler(start_method: StartMethod) -> None:
    before = signal.getsignal(signal.SIGINT)
    with Child("probe", interrupts_ignored, start_method=start_method) as child:
        assert child.result() is True
    assert signal.getsignal(signal.SIGINT) is before


def run_main(folder: Path, script: str) -> subprocess.CompletedProcess[str]:
    """`script` as the main module of a fresh interpreter in `folder`, which is on its path beside the project."""
    (folder / "main.py").write_text(script)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(folder)])}
    return subprocess.run([sys.executable, "main.py"], cwd=folder, env=env, capture_output=True, text=True, timeout=90)


STOPPED_WHILE_THE_SERVER_IMPORTS = """
import os, signal, threading, time
from runner.execute.processes import Child, start_fork_server, stop
from runner.signals import Interrupted, stop_on_signals
if __name__ == "__main__":
    stop_on_signals()
    start_fork_server(["slow_to_import"])
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    try:
        stop([Child("probe", time.sleep, 30, start_method="forkserver")])
        print("not stopped")
    except Interrupted:
        print("stopped", round(time.monotonic() - started) < 3)
"""


def test_a_ctrl_c_while_the_fork_server_imports_stops_the_start_of_its_child(tmp_path: Path) -> None:
    """Asking the server for a child waits out its preloads: a Ctrl-C meanwhile is seen, not ignored."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(3)\n")
    done = run_main(tmp_path, STOPPED_WHILE_THE_SERVER_IMPORTS)
    assert done.stdout.split() == ["stopped", "True"], done.stderr[-2000:]


STOPPED_AS_THE_SERVER_IS_ASKED = """
import signal
from multiprocessing import reduction
from runner.execute.processes import Child, start_fork_server, stop
from runner.signals import Interrupted, stop_on_signals
send = reduction.sendfds
def stopped_first(sock, fds):  # a Ctrl-C lands once the server is connected, before it has the request
    signal.raise_signal(signal.SIGINT)
    send(sock, fds)
if __name__ == "__main__":
    stop_on_signals()
    start_fork_server([])
    reduction.sendfds = stopped_first
    try:
        stop([Child("first", pow, 2, 3, start_method="forkserver")])
    except Interrupted:
        print("stopped")
    reduction.sendfds = send
    with Child("second", pow, 2, 5, start_method="forkserver") as second:
        print(second.result(timeout_s=60))
"""


def test_a_ctrl_c_as_the_fork_server_is_asked_for_a_child_leaves_the_server_serving(tmp_path: Path) -> None:
    """The stop waits until the request is whole: the server gets no empty one to die of with a traceback."""
    done = run_main(tmp_path, STOPPED_AS_THE_SERVER_IS_ASKED)
    assert done.stdout.split() == ["stopped", "32"], done.stderr[-2000:]
    assert "Traceback" not in done.stderr


STOP_DROPPED_BEFORE_THE_WAIT = """
import signal, time, weakref
from runner.execute.processes import Child
from runner.signals import Interrupted, stop_on_signals
class Held:
    pass
def stopped(_ref):  # a Ctrl-C that landed in a weakref callback, where Python cannot raise it
    raise Interrupted(signal.SIGINT)
if __name__ == "__main__":
    stop_on_signals()
    with Child("endless", time.sleep, 600) as child:
        held = Held()
        ref = weakref.ref(held, stopped)
        del held  # the callback runs here; its stop is kept for the next safe point
        started = time.monotonic()
        try:
            child.result()
            print("not stopped")
        except Interrupted:
            print("stopped", round(time.monotonic() - started) < 3)
"""


def test_a_stop_python_dropped_just_before_a_wait_on_a_child_ends_the_wait(tmp_path: Path) -> None:
    """Seen once in CI: a single run's Ctrl-C left it waiting on its endless worker until it was killed."""
    done = run_main(tmp_path, STOP_DROPPED_BEFORE_THE_WAIT)
    assert done.stdout.split() == ["stopped", "True"], done.stderr[-2000:]


def test_the_fork_server_ends_with_the_process_that_started_it() -> None:
    """Not once it has imported torch and noticed, seconds later: a stopped job leaves nothing running."""
    script = (
        "from runner.execute.forkserver_private import fork_server_pid\n"
        "from runner.execute.processes import start_fork_server\n"
        "start_fork_server()\n"
        "print(fork_server_pid())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    with pytest.raises(ProcessLookupError):  # ended and reaped, while it would still be importing torch
        os.kill(int(done.stdout), 0)


def test_answered_names_the_children_with_an_answer_or_an_end() -> None:
    quick, slow, dead = Child("quick", pow, 2, 3), Child("slow", hangs), Child("dead", dies)
    try:
        ready: set[str] = set()
        while len(ready) < 2:
            ready |= {child.name for child in answered([quick, slow, dead])}
        assert ready == {"quick", "dead"}
    finally:
        stop([quick, slow, dead])


@pytest.mark.parametrize(
    ("target", "message"),
    [(raises, "^ValueError: bad input$"), (dies, r"^the process died \(exit code -9\)$")],
)
def test_the_doctors_fresh_process_says_what_went_wrong_in_one_line(target: object, message: str) -> None:
    with FreshProcess(target) as fresh, pytest.raises(ProcessFailed, match=message):  # type: ignore[arg-type]
        fresh.result(timeout_s=60)


def test_the_doctors_fresh_process_gives_up_on_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(processes, "STOP_GRACE_S", 0.5)  # how long it waits for the hung process to end
    with FreshProcess(hangs) as fresh, pytest.raises(ProcessFailed, match=r"^no answer within 0.2 s$"):
        fresh.result(timeout_s=0.2)


# seconds a process left behind would run on: past any wait of a test, so only its parent's death ends it in time
OUTLIVES_ANY_WAIT_S = 600
# seconds the orphans get to end: the bound of a hang, not of a busy host (ending the server that imported torch
# takes seconds of CPU, which a loaded host gives slowly)
ORPHANS_END_WITHIN_S = 60


def says_it_runs_then_hangs() -> None:
    print("child", os.getpid(), flush=True)  # on the parent's stdout, which the child (or its server) inherited
    time.sleep(OUTLIVES_ANY_WAIT_S)


# a parent that starts a hanging child, prints the fork server's pid (if any), and waits to be killed
PARENT = """
import sys, time
from runner.execute.forkserver_private import fork_server_pid
from runner.execute.processes import Child
from tests.integration.test_processes import says_it_runs_then_hangs
child = Child("worker", says_it_runs_then_hangs, start_method=sys.argv[1])
print("server", fork_server_pid(), flush=True)
time.sleep(60)
"""


def gone(pid: int, within_s: float) -> bool:
    """Whether the process `pid` ends within `within_s` (a zombie counts as alive until reaped)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True  # gone (reaped by init once orphaned)
        time.sleep(0.1)
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's parent-death signal is Linux's")
def test_a_child_dies_with_a_parent_killed_without_a_word(start_method: StartMethod) -> None:
    command = [sys.executable, "-c", PARENT, start_method]
    with subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        pids = dict(parent.stdout.readline().split() for _ in range(2))  # once the child runs its target
        parent.kill()  # SIGKILL: the parent stops nothing itself
    child, server = pids["child"], pids["server"]
    assert (server == "None") == (start_method == "spawn")
    left = [int(pid) for pid in (child, server) if pid != "None" and not gone(int(pid), ORPHANS_END_WITHIN_S)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"{left} outlived their killed parent by {ORPHANS_END_WITHIN_S} s (child {child}, server {server})"


def vector_isa_probed() -> bool:
    """Whether inductor's probe of this CPU's vector instruction sets already ran in this process."""
    from torch._inductor.cpu_vec_isa import valid_vec_isa_list

    return valid_vec_isa_list.cache_info().currsize == 1


# a job's process that prepares the workers of one job, then asks a forked and a spawned child
PREPARED = """
import sys
from runner.compose import compose_config
from runner.config_loading import load_run_spec
from runner.execute.processes import Child
from runner.execute.workers import prepare_workers
from tests.integration.test_processes import vector_isa_probed
spec = load_run_spec(compose_config("+workload=rmsnorm_naive", "backend=cpu", *sys.argv[1:]))
prepare_workers([spec])
for method in ("forkserver", "spawn"):
    with Child("probe", vector_isa_probed, start_method=method) as child:
        print(method, child.result())
"""


def test_workers_forked_for_a_compiled_cpu_job_inherit_inductors_probe_of_the_cpu() -> None:
    # the probe builds and loads a library per instruction set: seconds each fresh process would pay
    # again; a spawned child, whose imports are its own, has not run it. Under a CUDA build of torch (or
    # with torch-neuronx) the server preloads no compiler, so its children probe for themselves too
    command = [sys.executable, "-c", PREPARED, "workload.compile=true"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=True)
    from runner.execute.workers import device_runtime_installed  # here: a spawned child imports this module

    forked = str(not device_runtime_installed())
    assert dict(line.split() for line in done.stdout.splitlines()) == {"forkserver": forked, "spawn": "False"}
