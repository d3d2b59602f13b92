"""The one way the runner starts a child process: its answer, its error, its death, its stop.

The targets are tiny functions of this module (a spawned child imports them by name), so each
child costs an interpreter start and no torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from runner.doctor.probe import FreshProcess, ProcessFailed
from runner.execute import processes
from runner.execute.processes import Child, ChildDied, ChildRaised, ChildSilent, answered, stop
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


def test_a_child_returns_its_value_with_its_own_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOVED_FOR_THE_CHILD", "parent's")
    monkeypatch.delenv("SET_FOR_THE_CHILD", raising=False)
    env = {"SET_FOR_THE_CHILD": "child's", "REMOVED_FOR_THE_CHILD": None}
    with Child("probe", environment_seen, "SET_FOR_THE_CHILD", "REMOVED_FOR_THE_CHILD", env=env) as child:
        assert child.result() == {"SET_FOR_THE_CHILD": "child's", "REMOVED_FOR_THE_CHILD": None}
    assert "SET_FOR_THE_CHILD" not in os.environ and os.environ["REMOVED_FOR_THE_CHILD"] == "parent's"


def test_a_child_that_raises_carries_its_traceback_and_its_error_in_one_line() -> None:
    with Child("probe", raises) as child, pytest.raises(ChildRaised) as raised:
        child.result()
    assert str(raised.value).startswith("probe raised: ValueError: bad input\nTraceback (most recent call last):")
    assert "in raises" in str(raised.value) and raised.value.error == "ValueError: bad input"


def test_a_child_killed_by_a_signal_died_with_its_exit_code() -> None:
    with Child("probe", dies) as child, pytest.raises(ChildDied, match=r"^probe died \(exit code -9\)$"):
        child.result()


def test_a_hung_child_is_silent_past_its_time_then_stopped() -> None:
    child = Child("probe", hangs)
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


def test_a_child_is_born_ignoring_interrupts_and_the_parent_keeps_its_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    with Child("probe", interrupts_ignored) as child:
        assert child.result() is True
    assert signal.getsignal(signal.SIGINT) is before


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


# a parent that starts a hanging child, prints the child's pid, and waits to be killed
PARENT = """
import time
from runner.execute.processes import Child
from tests.integration.test_processes import hangs
child = Child("worker", hangs)
print(child.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.skipif(sys.platform != "linux", reason="the kernel's parent-death signal is Linux's")
def test_a_child_dies_with_a_parent_killed_without_a_word() -> None:
    with subprocess.Popen([sys.executable, "-c", PARENT], cwd=REPO, stdout=subprocess.PIPE, text=True) as parent:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        parent.kill()  # SIGKILL: the parent stops nothing itself
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child_pid, 0)
        except ProcessLookupError:
            return  # gone (reaped by init once orphaned)
        time.sleep(0.1)
    os.kill(child_pid, signal.SIGKILL)
    pytest.fail(f"the child {child_pid} outlived its killed parent by 10 s")
