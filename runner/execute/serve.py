"""One side of a comparison run in one invocation: a server of fresh steady-state workers, and its client.

`python -m runner.execute.serve PARENT_PID [OVERRIDES...]`, run in a tree, measures with its conf/
and code. Each stdin line (`{}`, or `{"turns": PATH, "name": NAME}` to take turns at that referee)
asks for one fresh worker, answered `{"median_ms": ...}` or `{"error": "..."}` after a first
`{"ready": true, "turns": ...}` (whether this side's code and device can take turns). `{"check": true}`
asks for a worker that makes the first call and checks the output instead, answered `{"checks": {...}}`
(a server from before checks answers it with a median). It ends when stdin closes, or with its parent.
"""

from __future__ import annotations

import json
import os
import select
import signal
import statistics
import subprocess
import sys
from contextlib import suppress
from pathlib import Path
from typing import IO, Any

from hydra.errors import CompactHydraException

from runner.compose import compose_config, refusal
from runner.config_loading import load_run_spec
from runner.execute.processes import ChildFailed, ChildSilent, die_with_parent, end_process
from runner.measure.turns import TurnsAddress
from runner.secrets import one_line
from runner.signals import skip_final_collections

# the server's module, run in each side's tree
MODULE = "runner.execute.serve"


class SideFailed(ChildFailed):
    """A side's server refused its config, its worker failed, or the server died; the message names the side."""


def _say(answers: IO[str], message: dict[str, Any]) -> None:
    print(json.dumps(message), file=answers, flush=True)


def serve(overrides: list[str], requests: IO[str], answers: IO[str]) -> int:
    """Answer each request line with one fresh worker's median step time; 1 when the config is refused."""
    try:
        spec = load_run_spec(compose_config(*overrides))
        # torch loads only past a config that composed: a refusal takes a second, not an import of torch
        from runner.backends.base import check_cache_flush
        from runner.backends.registry import make_backend
        from runner.execute.workers import checked_first_call, steady_state_in_processes
        from runner.measure.compile_cache import use_compile_cache

        use_compile_cache(spec)  # before anything compiles, as a job does
        backend = make_backend(spec.backend)
        backend.worker_processes(1)  # a device whose process holds it refuses workers
        check_cache_flush(spec, type(backend))
    except Exception as err:  # noqa: BLE001  (bad config, an unknown option: the client reports it)
        _say(answers, {"error": refusal(err) if isinstance(err, CompactHydraException) else one_line(err)})
        return 1
    _say(answers, {"ready": True, "turns": backend.traits.workers_take_turns})
    for line in requests:
        request = json.loads(line)
        turns_at = TurnsAddress(request["turns"], request["name"]) if "turns" in request else None
        try:
            if request.get("check"):
                _say(answers, {"checks": checked_first_call(spec, "the gate")})
                continue
            (worker,) = steady_state_in_processes(spec, 1, turns_at).step_ms
        except ChildFailed as err:
            _say(answers, {"error": str(err).splitlines()[0]})
            continue
        _say(answers, {"median_ms": statistics.median(ms for repeat in worker for ms in repeat)})
    return 0


def main(argv: list[str]) -> int:
    """The server's process: answers on a copy of stdout, anything else printed goes to stderr."""
    parent_pid, *overrides = argv
    die_with_parent(int(parent_pid))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C reaches the whole group: the client stops this
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # a worker's or a library's prints cannot garble answers
    return serve(overrides, sys.stdin, answers)


class SideServer:
    """The client of one side's server, started in `tree`: a side of the rounds (`runner.execute.rounds.Side`)."""

    def __init__(self, side: str, tree: Path, overrides: list[str]) -> None:
        self.name = side
        self.takes_turns = False
        path = [str(tree), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        self._process = subprocess.Popen(
            [sys.executable, "-m", MODULE, str(os.getpid()), *overrides],
            cwd=tree,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a group of its own, which `stop` ends whole (its fork server too)
        )

    def _ended(self) -> SideFailed:
        return SideFailed(f"{self.name}: its server ended (exit status {self._process.wait()})")

    def _answer(self) -> dict[str, Any]:
        assert self._process.stdout is not None
        if not (line := self._process.stdout.readline()):
            raise self._ended()
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise SideFailed(f"{self.name}: {answer['error']}")
        return answer

    def ready(self) -> None:
        """Wait until the server composed its config (else SideFailed); `takes_turns` then says if its workers can."""
        self.takes_turns = bool(self._answer().get("turns"))

    def _send(self, request: dict[str, Any]) -> None:
        """One request line to the server (SideFailed: the server ended)."""
        assert self._process.stdin is not None
        try:
            self._process.stdin.write(json.dumps(request) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            raise self._ended() from None

    def start(self, number: int = 0, turns_at: TurnsAddress | None = None) -> None:
        """Start one fresh worker, taking turns at `turns_at` if given (SideFailed: the server ended)."""
        self._send({} if turns_at is None else {"turns": turns_at.path, "name": turns_at.name})

    def ended(self) -> bool:
        """Whether an answer (or the server's end) is there to read: a worker that failed says so at once."""
        assert self._process.stdout is not None
        return bool(select.select([self._process.stdout], [], [], 0)[0])

    def result(self, timeout_s: float | None = None) -> float:
        """The worker's median step time in ms, once it answers (SideFailed: the worker failed, or the server ended).

        ChildSilent: no answer within `timeout_s` (None: no limit); the worker ends with its server (`close`).
        """
        assert self._process.stdout is not None
        if timeout_s is not None and not select.select([self._process.stdout], [], [], timeout_s)[0]:
            raise ChildSilent(f"{self.name}: its worker", timeout_s)
        return float(self._answer()["median_ms"])

    def checks(self) -> dict[str, str | float]:
        """A worker's first call and output checks, by the names a run logs them under (SideFailed: it failed).

        It fills the compile caches as the side's first worker; a server from before checks runs a timed worker
        instead, and its side has nothing recorded.
        """
        self._send({"check": True})
        return dict(self._answer().get("checks", {}))

    def stop(self) -> None:
        """Nothing: a worker the rounds leave behind ends with its server (`close`)."""

    def close(self) -> None:
        """Close its stdin and end it with its fork server and workers."""
        if self._process.stdin is not None:
            with suppress(BrokenPipeError):  # it ended already
                self._process.stdin.close()
        end_process(self._process, whole_group=True)


if __name__ == "__main__":
    skip_final_collections()
    sys.exit(main(sys.argv[1:]))
