"""Turns between the workers of a round, so the host's drift falls on all alike (docs/gate.md).

Over a Unix socket each worker names itself, then for each part waits for `GO`, runs it and answers
`MORE`, or `DONE` after its last; one that ends first is left out and its side reports why.
"""

from __future__ import annotations

import math
import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

GO, MORE, DONE = b"g", b"m", b"d"
# how long the referee waits for the workers to connect: a spawned one imports torch first, on a busy host
CONNECT_TIMEOUT_S = 120.0
# how often the referee, waiting for workers to connect, asks whether any has ended instead
_CONNECT_POLL_S = 0.25


class TurnsLost(RuntimeError):
    """The referee ended, so no turn will come."""


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
        """Wait for `GO`; TurnsLost when the referee ended (its side stops this worker's job)."""
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


# what a worker's timing loop calls around each part it runs in turn: take, give, and finish (no more parts)
Turns = NoTurns | RefereedTurns


def turns_for(address: TurnsAddress | None) -> Turns:
    """A worker's turns: given by its referee, or all its own."""
    return NoTurns() if address is None else RefereedTurns(address)


@contextmanager
def referee() -> Iterator[tuple[str, socket.socket]]:
    """A listening socket for one round's workers, in a temporary folder: its path, and the socket to give turns on."""
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


def give_turns(
    listener: socket.socket,
    order: list[str],
    ended: Callable[[str], bool] = lambda name: False,
    timeout_s: float | None = None,
) -> set[str]:
    """Hand the turn round the workers in `order` until each says `DONE` or ends; TimeoutError if one never connects.

    A worker whose turns add up to more than `timeout_s` (None: no limit) is hung: it is left out, and
    named in what this returns, so its side stops it; the others go on.
    """
    listener.settimeout(_CONNECT_POLL_S)
    workers: dict[str, socket.socket] = {}
    waiting = list(order)
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    hung: set[str] = set()
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
        left = dict.fromkeys(workers, math.inf if timeout_s is None else timeout_s)
        queue = deque(name for name in order if name in workers)
        while queue:
            name = queue.popleft()
            started = time.monotonic()
            try:
                if left[name] <= 0:  # (a timeout of 0 would make the socket non-blocking)
                    raise TimeoutError
                workers[name].settimeout(None if math.isinf(left[name]) else left[name])
                workers[name].sendall(GO)
                answer = workers[name].recv(1)
            except TimeoutError:
                hung.add(name)
                continue
            except OSError:  # it ended while it held the turn
                answer = b""
            left[name] -= time.monotonic() - started
            if answer == MORE:
                queue.append(name)
    finally:
        for connection in workers.values():
            connection.close()
    return hung
