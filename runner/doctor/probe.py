"""A probe's verdict, and fresh processes to run probes in.

Most Neuron assumptions are about what a process does to the runtime (starting it,
reserving cores, caching a count), so each probe runs in a spawned process of its own,
with the environment it needs, and a crash or hang there is the probe's UNKNOWN, never the
doctor's end.
"""

from __future__ import annotations

import multiprocessing
import traceback
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import asdict, dataclass
from multiprocessing.connection import Connection
from typing import Any

from runner.execute.workers import environment

PASS, FAIL, UNKNOWN = "PASS", "FAIL", "UNKNOWN"


@dataclass(frozen=True)
class Verdict:
    """What one probe found.

    `breaks_runner` marks a FAIL of an assumption the runner relies on (the doctor then exits
    1); a FAIL without it means the runner copes, and `fix` says what the user may change.
    """

    probe: str
    assumption: str
    status: str
    evidence: str
    fix: str = ""
    breaks_runner: bool = False
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The JSON report's form."""
        return asdict(self)


class ProcessFailed(RuntimeError):
    """A fresh process raised, died or ran past its time; the message says which."""


def _call(target: Callable[..., Any], args: tuple[Any, ...], results: Connection, hold: Connection | None) -> None:
    try:
        results.send(("ok", target(*args)))
    except BaseException as err:  # noqa: BLE001  (any failure is the parent's to report)
        results.send(("error", f"{type(err).__name__}: {err}", traceback.format_exc()))
        return
    if hold is not None:  # keep the process (and what it holds) alive until released
        hold.recv()


class FreshProcess:
    """`target(*args)` in a spawned process; with `hold`, the process stays alive until closed."""

    def __init__(
        self,
        target: Callable[..., Any],
        *args: Any,
        env: Mapping[str, str | None] | None = None,
        hold: bool = False,
        name: str = "doctor-probe",
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._results, send = context.Pipe(duplex=False)
        self._release: Connection | None = None
        keep: Connection | None = None
        if hold:
            keep, self._release = context.Pipe(duplex=False)
        self.process = context.Process(target=_call, args=(target, args, send, keep), name=name)
        with environment(env or {}):
            self.process.start()
        send.close()

    def result(self, timeout_s: float) -> Any:
        """The target's return value.

        Raises:
            ProcessFailed: it raised (with its one-line error), died, or ran past `timeout_s`.
        """
        if not self._results.poll(timeout_s):
            self.close()
            raise ProcessFailed(f"no answer within {timeout_s:g} s")
        try:
            reply = self._results.recv()
        except EOFError:
            self.process.join(5)
            raise ProcessFailed(f"the process died (exit code {self.process.exitcode})") from None
        if reply[0] == "error":
            raise ProcessFailed(reply[1])
        return reply[1]

    def close(self) -> None:
        """Release a held process and make sure it is gone."""
        if self._release is not None:
            with suppress(OSError):  # already gone
                self._release.send(None)
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()

    def __enter__(self) -> FreshProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_fresh_process(
    target: Callable[..., Any], *args: Any, env: Mapping[str, str | None] | None = None, timeout_s: float = 300
) -> Any:
    """Run `target(*args)` in a new spawned process and return its result.

    Raises:
        ProcessFailed: it raised, died or ran past `timeout_s`.
    """
    with FreshProcess(target, *args, env=env) as process:
        return process.result(timeout_s)
