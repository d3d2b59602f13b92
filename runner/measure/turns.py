"""Turns between the workers of a round: each times a stretch of its steps while the others wait.

Workers timed one after another each meet the host in a different stretch of time, and this
project's 2-core host drifts over seconds: the medians of 25 and of 400 consecutive steps
spread 12% and 10%. Two workers of the same config forked from one process, one after the
other on one core, read medians 6.2% and 9.6% apart (sd of the log ratio; two runs, 30 and 20
pairs), and 3.9% and 1.3% taking turns a stretch at a time (8 stretches of 25 steps); with new
memory each stretch (runner.measure.layouts), 7.9-15.6% against 7.0-8.4% (three runs of 30
pairs; docs/gate.md, `--against`). So where
the device allows, the workers of a round take turns: a referee (the gate, or a sweep's rounds)
hands the turn to one worker at a time, in the round's order, and each worker runs its own
parts (building the workload and its first call, the warm-up, each stretch of timed steps)
only while it holds the turn.

The referee listens on a Unix socket; each worker connects, names itself, then for each part
waits for `GO`, runs the part and answers `MORE`, or `DONE` after its last. A worker that ends
without `DONE` (it failed), or before it connected, is simply left out of the turns; its side
reports the failure.
"""

from __future__ import annotations

import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

GO, MORE, DONE = b"g", b"m", b"d"
# how long the referee waits for every worker to connect: each connects first thing, but a
# spawned worker imports torch first, and a busy host starts processes slowly
CONNECT_TIMEOUT_S = 120.0
# how often the referee, waiting for workers to connect, asks whether any has ended instead
CONNECT_POLL_S = 0.25


class TurnsLost(RuntimeError):
    """The referee ended, so no turn will come."""


class Turns(Protocol):
    """What a worker's timing loop calls around each part it runs in turn."""

    def take(self) -> None:
        """Wait for this worker's turn."""

    def give(self) -> None:
        """Hand the turn on."""

    def finish(self) -> None:
        """Take one last turn only to say this worker needs no more."""


class NoTurns:
    """A worker alone: every turn is its own."""

    def take(self) -> None:
        """Nothing to wait for."""

    def give(self) -> None:
        """No one to hand to."""

    def finish(self) -> None:
        """No one to tell."""


@dataclass(frozen=True)
class TurnsAddress:
    """Where a worker finds its referee, and the name it gives itself there."""

    path: str
    name: str


class RefereedTurns:
    """A worker's turns, given by a referee at `address`."""

    def __init__(self, address: TurnsAddress) -> None:
        self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._socket.connect(address.path)
        self._socket.sendall(address.name.encode() + b"\n")

    def take(self) -> None:
        """Wait for `GO`.

        Raises:
            TurnsLost: the referee ended (its side stops this worker's job).
        """
        if self._socket.recv(1) != GO:
            self._socket.close()
            raise TurnsLost("the referee of this worker's turns ended")

    def give(self) -> None:
        """Answer `MORE`: this worker has parts left."""
        self._socket.sendall(MORE)

    def finish(self) -> None:
        """Answer the next `GO` with `DONE`, and hang up."""
        self.take()
        self._socket.sendall(DONE)
        self._socket.close()


def turns_for(address: TurnsAddress | None) -> Turns:
    """A worker's turns: given by its referee, or all its own."""
    return NoTurns() if address is None else RefereedTurns(address)


@contextmanager
def referee() -> Iterator[tuple[str, socket.socket]]:
    """A listening socket for one round's workers: its path, and the socket to `give_turns` on.

    In a temporary folder of its own, removed with it.
    """
    with tempfile.TemporaryDirectory(prefix="runner-turns-") as own:
        path = str(Path(own) / "turns.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen()
            yield path, listener
        finally:
            listener.close()
            Path(path).unlink(missing_ok=True)


def give_turns(listener: socket.socket, order: list[str], ended: Callable[[str], bool] = lambda name: False) -> None:
    """Hand the turn round the workers named in `order` until each has answered `DONE` or ended.

    A worker that `ended` says has ended before it connected is left out at once, not waited for.

    Raises:
        TimeoutError: a worker did not connect within `CONNECT_TIMEOUT_S` (its side says why).
    """
    listener.settimeout(CONNECT_POLL_S)
    workers: dict[str, socket.socket] = {}
    waiting = list(order)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    try:
        while waiting := [name for name in waiting if name not in workers and not ended(name)]:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{', '.join(waiting)}: its worker did not come for its turns in {CONNECT_TIMEOUT_S:g} s"
                )
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            connection.settimeout(None)
            workers[connection.makefile("rb").readline().decode().strip()] = connection
        queue = deque(name for name in order if name in workers)
        while queue:
            name = queue.popleft()
            try:
                workers[name].sendall(GO)
                answer = workers[name].recv(1)
            except OSError:  # it ended while it held the turn
                answer = b""
            if answer == MORE:
                queue.append(name)
    finally:
        for connection in workers.values():
            connection.close()
