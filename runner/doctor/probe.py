"""A probe's verdict, and fresh processes to run probes in.

Most Neuron assumptions are about what a process does to the runtime (starting it, reserving
cores, caching a count), so each probe runs in a spawned process of its own; a crash or hang
there is the probe's UNKNOWN, never the doctor's end.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runner.execute.processes import Child, ChildDied, ChildRaised, ChildSilent, stop

PASS, FAIL, UNKNOWN = "PASS", "FAIL", "UNKNOWN"


@dataclass(frozen=True)
class Verdict:
    """What one probe found; `breaks_runner` marks a FAIL the runner cannot cope with (the doctor exits 1)."""

    probe: str
    assumption: str
    status: str
    evidence: str
    fix: str = ""
    breaks_runner: bool = False
    seconds: float = 0.0


@dataclass(frozen=True)
class Assumption:
    """One assumption a probe checks, named once; its methods give the verdicts on it."""

    probe: str
    text: str

    def holds(self, evidence: str) -> Verdict:
        """PASS."""
        return Verdict(self.probe, self.text, PASS, evidence)

    def fails(self, evidence: str, fix: str = "", breaks_runner: bool = False) -> Verdict:
        """FAIL, with what the user may change, and whether runs break."""
        return Verdict(self.probe, self.text, FAIL, evidence, fix, breaks_runner)

    def unknown(self, evidence: str, fix: str = "") -> Verdict:
        """UNKNOWN: the probe could not tell."""
        return Verdict(self.probe, self.text, UNKNOWN, evidence, fix)

    def judge(self, holds: bool, evidence: str, fix: str, breaks_runner: bool = False) -> Verdict:
        """PASS when it `holds`, else FAIL with `fix`."""
        return self.holds(evidence) if holds else self.fails(evidence, fix, breaks_runner)


class ProcessFailed(RuntimeError):
    """A fresh process raised, died or ran past its time; the message says which."""


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
        # not a daemon: a probe may start processes of its own
        self._child = Child(name, target, *args, env=env, hold=hold, daemon=False)

    def result(self, timeout_s: float) -> Any:
        """The target's return value; ProcessFailed if it raised (its one-line error), died or ran past `timeout_s`."""
        try:
            return self._child.result(timeout_s)
        except ChildSilent:
            self.close()
            raise ProcessFailed(f"no answer within {timeout_s:g} s") from None
        except ChildDied as death:
            raise ProcessFailed(f"the process died (exit code {death.exitcode})") from None
        except ChildRaised as error:
            raise ProcessFailed(error.error) from None

    def close(self) -> None:
        """Release a held process and make sure it is gone."""
        self._child.release()
        stop([self._child])

    def __enter__(self) -> FreshProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def in_fresh_process(
    target: Callable[..., Any], *args: Any, env: Mapping[str, str | None] | None = None, timeout_s: float = 300
) -> Any:
    """`target(*args)`'s result from a new spawned process; ProcessFailed if it raised, died or ran past `timeout_s`."""
    with FreshProcess(target, *args, env=env) as process:
        return process.result(timeout_s)
