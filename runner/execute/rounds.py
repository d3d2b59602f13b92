"""The one rounds engine, for a sweep's jobs and for the gate's two sides: fresh workers in interleaved rounds.

Each round starts one fresh worker of every side in a new random order, so a slow stretch of the
host falls on all sides alike. Where every device allows it, they take turns (`runner.measure.turns`):
A/A CPU workers read 5.2% apart in turns, 19.3% one after the other (sd of the log ratio, 80
rounds, `benchmarks/turns_pays.py`). Torch-free: the gate over stored runs imports it.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Sequence
from functools import partial
from typing import Protocol, TypeVar

from runner.execute.processes import ChildFailed, ChildSilent
from runner.measure.turns import TurnsAddress, give_turns, referee

log = logging.getLogger(__name__)

Result = TypeVar("Result", covariant=True)


class Side(Protocol[Result]):
    """One side of a round: it starts one fresh worker per round and reads what that worker timed."""

    # the name it takes at the referee, unique in its round
    name: str

    def start(self, number: int, turns_at: TurnsAddress | None) -> None:
        """Start round `number`'s worker; with `turns_at`, one that runs only in the turns its referee gives."""

    def ended(self) -> bool:
        """Whether the worker has answered or died: one that ended before it came for turns is not waited for."""

    def result(self, timeout_s: float | None = None) -> Result:
        """What the worker timed, once it answers; ChildFailed (naming the side, saying how) if it failed.

        ChildSilent when no answer came in `timeout_s` (None: no limit).
        """

    def stop(self) -> None:
        """Stop the worker if it still runs (an error or a stop elsewhere in the round); nothing if none."""


def round_orders(rounds: list[int], rng: random.Random) -> list[list[int]]:
    """Per round, the sides (by index) with a worker in it, in a fresh random order."""
    orders = []
    for number in range(1, max(rounds, default=0) + 1):
        order = [side for side, count in enumerate(rounds) if count >= number]
        rng.shuffle(order)
        orders.append(order)
    return orders


def run_round(
    sides: Sequence[Side[Result]], number: int, in_turns: bool, timeout_s: float | None = None
) -> list[Result | ChildFailed]:
    """One worker of each side, started in the order given: in turns a stretch at a time, or one after the other.

    Each side's entry is what its worker timed, or the error it failed with: the caller decides what that costs.
    A worker that runs past `timeout_s` (None: no limit; in turns, its own turns add up) fails with ChildSilent.
    """
    try:
        if not in_turns or len(sides) < 2:
            results: list[Result | ChildFailed] = []
            for side in sides:
                side.start(number, None)
                results.append(or_failure(partial(side.result, timeout_s)))
            return results
        by_name = {side.name: side for side in sides}
        hung: set[str] = set()
        with referee() as (path, listener):
            for side in sides:
                side.start(number, TurnsAddress(path, side.name))
            try:
                hung = give_turns(listener, list(by_name), lambda name: by_name[name].ended(), timeout_s)
            except TimeoutError as err:  # the workers waiting for turns then fail too
                log.warning("rounds: round %d: %s", number, err)
            return [
                ChildSilent(f"round {number} worker of side {side.name}", timeout_s or 0.0)
                if side.name in hung
                else or_failure(partial(side.result, timeout_s))
                for side in sides
            ]
    finally:  # a stop or an error on the way: no worker is left behind
        for side in sides:
            side.stop()


def or_failure(read: Callable[[], Result]) -> Result | ChildFailed:
    """What `read` returns, or the ChildFailed it raised: one failed worker leaves the others' results standing."""
    try:
        return read()
    except ChildFailed as err:
        return err
