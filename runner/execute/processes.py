"""Child processes that run one function and send back its answer: started, collected, stopped.

A child inherits no torch, device or thread-pool state: 'spawn' starts a fresh interpreter;
'forkserver' forks a server that imported `FORK_SERVER_PRELOAD` and touched no device. The parent
never leaves a child behind: terminate, then kill what outlives the grace period.
"""

from __future__ import annotations

import atexit
import ctypes
import math
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

from runner.execute.forkserver_private import (
    WholeRequestProcess,
    ensure_fork_server,
    fork_server_pid,
    let_go_of_the_fork_server,
)
from runner.signals import raise_if_stopped

StartMethod = Literal["spawn", "forkserver"]
# what the fork server imports so that its children need not (named, not imported: this module
# stays torch-free); a name the server fails to import is skipped, and a child imports it itself
FORK_SERVER_PRELOAD = ("torch", "runner.execute.workers", "workloads")

# seconds a child gets to end after a terminate (or a release) before it is killed
STOP_GRACE_S = 5.0
# how often a wait on children looks for a stop Python dropped (runner.signals): a stop that landed in a
# garbage-collector callback just before a wait on an endless child left the job waiting for ever
_SAFE_POINT_S = 0.5
# prctl(2): the signal the kernel sends this process when the thread that started it ends
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Answer:
    """What a function did: the value it returned, or the error it raised (one line and its traceback)."""

    value: Any = None
    error: str | None = None
    traceback: str = ""

    @classmethod
    def of_error(cls, err: BaseException) -> Answer:
        """The answer of a function that raised `err`."""
        return cls(error=f"{type(err).__name__}: {err}", traceback="".join(traceback.format_exception(err)))


class ChildFailed(RuntimeError):
    """A child process raised, died or gave no answer in time; the message names it and says how."""


class ChildRaised(ChildFailed):
    """The child's function raised; the message carries its traceback, `error` the error in one line."""

    def __init__(self, name: str, answer: Answer, note: str = "") -> None:
        # the error on the first line: a job's one-line failure is that line
        super().__init__(f"{name} raised{f' ({note})' if note else ''}: {answer.error}\n{answer.traceback}")
        self.answer = answer
        self.error = answer.error or ""


class ChildDied(ChildFailed):
    """The child ended without an answer: a crash, a signal, the out-of-memory killer."""

    def __init__(self, name: str, exitcode: int | None) -> None:
        super().__init__(f"{name} died (exit code {exitcode})")
        self.exitcode = exitcode


class ChildSilent(ChildFailed):
    """The child gave no answer within the time it was given; it may still be running."""

    def __init__(self, name: str, timeout_s: float) -> None:
        super().__init__(f"{name} gave no answer within {timeout_s:g} s")


def die_with_parent(parent_pid: int | None = None) -> None:
    """Have the kernel kill this process when its parent dies (Linux only): a SIGKILLed parent sends no word.

    The signal comes when the parent's starting thread ends, so children are started from its main
    thread. `parent_pid` names a parent multiprocessing did not start (the gate's side servers).
    """
    if sys.platform != "linux":
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if parent_pid is not None:
        gone = os.getppid() != parent_pid
    else:  # multiprocessing's record of the process that started this one, in either method
        gone = (starter := multiprocessing.parent_process()) is not None and not starter.is_alive()
    if gone:  # the parent died before the request took hold
        os.kill(os.getpid(), signal.SIGKILL)


def _answer(
    target: Callable[..., Any],
    args: tuple[Any, ...],
    answers: Connection,
    hold: Connection | None,
    environment: dict[str, str] | None,
) -> None:
    """The child's main: take its environment, call the target, send its answer, and, when held, wait to be released."""
    let_go_of_the_fork_server()
    die_with_parent()
    if environment is not None:  # a forked child has the fork server's, fixed when the server started
        os.environ.clear()
        os.environ.update(environment)
    try:
        answer = Answer(value=target(*args))
    except BaseException as err:  # noqa: BLE001  (any failure is the parent's to report)
        answer = Answer.of_error(err)
    try:
        answers.send(answer)
    except BrokenPipeError:  # the parent is gone (stopped by a signal): no one to tell, and this child ends with it
        return
    if hold is not None:  # keep the process (and what it holds, a runtime, cores) alive until released
        with suppress(EOFError):
            hold.recv()


def start_fork_server(preload: Iterable[str] = ()) -> None:
    """Start the fork server (this environment, SIGINT ignored) early: its imports then overlap the job's work."""
    with _born_ignoring_interrupts():
        ensure_fork_server([*FORK_SERVER_PRELOAD, *preload])
    atexit.unregister(_end_fork_server)  # once, however often the server is asked for
    atexit.register(_end_fork_server)


def _end_fork_server() -> None:
    """As this process exits: end its fork server now, not after its preloads (2-3 s of torch past a stopped job).

    It holds nothing to clean up, and its children end with it (`die_with_parent`).
    """
    if (pid := fork_server_pid()) is not None:
        with suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)


class Child:
    """`target(*args)` in a new process named `name`, with `env` set for it (None removes a variable).

    A forked child gets this process's environment (with `env`) only as its target starts: what an
    interpreter reads as it starts (MALLOC_*, OMP_NUM_THREADS) the target sets itself. With `hold`,
    it lives on until `release`d. A child that starts processes of its own must not be a daemon.
    """

    def __init__(
        self,
        name: str,
        target: Callable[..., Any],
        *args: Any,
        env: Mapping[str, str | None] | None = None,
        hold: bool = False,
        daemon: bool = True,
        start_method: StartMethod = "spawn",
    ) -> None:
        forked = start_method == "forkserver"
        context = multiprocessing.get_context("forkserver") if forked else multiprocessing.get_context("spawn")
        if forked:
            start_fork_server()
        self.name = name
        self._answers, send = context.Pipe(duplex=False)
        self._release: Connection | None = None
        keep, self._release = context.Pipe(duplex=False) if hold else (None, None)
        environment = _with(os.environ, env or {}) if forked else None
        process = WholeRequestProcess if forked else context.Process
        self._process = process(target=_answer, args=(target, args, send, keep, environment), name=name, daemon=daemon)
        if forked:  # born of a server that ignores SIGINT; the wait for its fork must still see a stop
            self._process.start()
        else:
            with _environment(env or {}), _born_ignoring_interrupts():
                self._process.start()
        send.close()

    @property
    def pid(self) -> int | None:
        """The process id, for the log (and for a signal from outside)."""
        return self._process.pid

    def is_alive(self) -> bool:
        """Whether the process still runs."""
        return self._process.is_alive()

    def result(self, timeout_s: float | None = None) -> Any:
        """The target's return value, once it comes (waiting at most `timeout_s`, when given).

        Raises:
            ChildRaised: the target raised.
            ChildDied: the process ended without an answer.
            ChildSilent: no answer within `timeout_s` (the child is left running).
        """
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        while not self._answers.poll(max(0.0, min(_SAFE_POINT_S, deadline - time.monotonic()))):
            raise_if_stopped()
            if time.monotonic() >= deadline:
                raise ChildSilent(self.name, timeout_s or 0.0)
        try:
            answer: Answer = self._answers.recv()
        except EOFError:
            self._process.join(STOP_GRACE_S)
            raise ChildDied(self.name, self._process.exitcode) from None
        if answer.error is not None:
            raise ChildRaised(self.name, answer)
        return answer.value

    def release(self) -> None:
        """Let a held child go; give the child (held or not) the grace period to end on its own."""
        if self._release is not None:
            with suppress(OSError):  # already gone
                self._release.send(None)
        self._process.join(STOP_GRACE_S)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc: object) -> None:
        stop([self])


def answered(children: Iterable[Child], timeout_s: float | None = None) -> list[Child]:
    """Wait until any of the children has an answer or has ended; those that have, in the order given.

    None of them (an empty list) when `timeout_s` passed first.
    """
    children = list(children)
    waitables = [waitable for child in children for waitable in (child._answers, child._process.sentinel)]
    deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
    while not (ready := set(wait(waitables, timeout=max(0.0, min(_SAFE_POINT_S, deadline - time.monotonic()))))):
        raise_if_stopped()
        if time.monotonic() >= deadline:
            break
    return [child for child in children if child._answers in ready or child._process.sentinel in ready]


def end_process(process: subprocess.Popen[Any], whole_group: bool = False) -> None:
    """Terminate a process this one started, and kill what is still there after the grace period.

    With `whole_group` (a process in a session of its own), its whole group: its fork server, still
    starting, would otherwise fork a worker afterwards, into a tree that may be gone.
    """
    send = partial(os.killpg, process.pid) if whole_group else process.send_signal  # no-op once reaped
    with suppress(ProcessLookupError):
        send(signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        process.wait(STOP_GRACE_S)
    with suppress(ProcessLookupError):  # what is left: of the group, the process included
        send(signal.SIGKILL)
    process.wait()


def stop(children: Iterable[Child]) -> None:
    """Never leave a child behind: terminate the live ones, kill what outlives the grace period."""
    processes = [child._process for child in children]
    for process in processes:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join()


@contextmanager
def _environment(variables: Mapping[str, str | None]) -> Iterator[None]:
    """Set (or, for None, remove) variables for the processes started inside the block."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        _apply(variables)
        yield
    finally:
        _apply(saved)


def _with(environ: Mapping[str, str], variables: Mapping[str, str | None]) -> dict[str, str]:
    """`environ` with `variables` set (or, for None, removed)."""
    return {name: value for name, value in {**environ, **variables}.items() if value is not None}


def _apply(variables: Mapping[str, str | None]) -> None:
    for name, value in variables.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@contextmanager
def _born_ignoring_interrupts() -> Iterator[None]:
    """Start the processes started inside the block with SIGINT ignored from birth (the parent stops them).

    A Ctrl-C that reached a starting interpreter killed it (`Fatal Python error: init_import_site`).
    The fork server gives its children this handling, so a forked child starts outside the block:
    asking the server waits for its preloads, and a Ctrl-C ignored meanwhile was lost.
    """
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
