"""Both sides of `gate --against`, measured round by round on the rounds engine, each side by its own tree's code.

Each side is a server in its own tree (`runner.execute.serve`), started afresh every few rounds.
"""

from __future__ import annotations

import math
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from scipy.stats import gmean

from runner.execute.processes import ChildFailed
from runner.execute.rounds import round_orders, run_round
from runner.execute.serve import SideServer

SIDES = ("baseline", "candidate")
# Rounds one pair of side servers runs before both start afresh. Every worker of a side starts from
# its server, and under load one side of an A/A gate read 15% slower in nearly every round: whatever
# a server started with holds for all its rounds, so the test pairs server pairs, not rounds.
ROUNDS_PER_SERVERS = 3


def progress(message: str) -> None:
    """A line on stderr while both sides run: a round takes seconds."""
    print(message, file=sys.stderr, flush=True)


@dataclass
class SideRounds:
    """Both sides' per-round medians, the order each round ran the sides in, and the server pair that ran it."""

    seed: int
    orders: list[list[str]] = field(default_factory=list)
    ms: dict[str, list[float]] = field(default_factory=lambda: {side: [] for side in SIDES})
    # per round, which pair of side servers (from 1) ran it
    servers: list[int] = field(default_factory=list)
    # whether both sides' workers took turns (runner.measure.turns), not one after the other
    turns: bool = False
    # per side, what its check worker logged: first call, device memory peak, output finite, accuracy (by name)
    checks: dict[str, dict[str, str | float]] = field(default_factory=lambda: {side: {} for side in SIDES})

    def per_servers(self, side: str) -> list[float]:
        """The side's geometric mean per server pair: the values the test pairs."""
        return [
            float(gmean([ms for ms, pair in zip(self.ms[side], self.servers, strict=True) if pair == number]))
            for number in sorted(set(self.servers))
        ]


def rounds_per_servers(count: int) -> int:
    """How many of `count` rounds each pair of servers runs: `ROUNDS_PER_SERVERS`, fewer for three pairs at least.

    Two pairs would leave the test one degree of freedom, whose t interval is too wide to judge anything.
    """
    return max(1, min(ROUNDS_PER_SERVERS, math.ceil(count / 3)))


def run_rounds(trees: dict[str, Path], overrides: list[str], count: int, seed: int) -> SideRounds:
    """Each side's first worker (its first call compiles; it checks the output, not timed), then the rounds."""
    result = SideRounds(seed)
    orders = round_orders([count] * len(SIDES), random.Random(seed))
    per_pair = rounds_per_servers(count)
    for pair, first in enumerate(range(0, count, per_pair), 1):
        last = min(first + per_pair, count)
        if pair > 1:
            progress(f"gate: servers {pair}: both sides' servers start afresh for rounds {first + 1}-{last} ...")
        with _side_servers(trees, overrides) as servers:
            if pair == 1:  # the caches are on disk from then on: later servers' first workers count
                for side, server in servers.items():
                    progress(
                        f"gate: {side}: a first worker (fills the compile caches, checks the output; not timed) ..."
                    )
                    result.checks[side] = server.checks()
            result.turns = all(server.takes_turns for server in servers.values())
            for number in range(first + 1, last + 1):
                order = [SIDES[index] for index in orders[number - 1]]
                timed = run_round([servers[side] for side in order], number, result.turns)
                for side, ms in zip(order, timed, strict=True):
                    if isinstance(ms, ChildFailed):  # a side's worker failed: SideFailed, naming the side
                        raise ms
                    result.ms[side].append(ms)
                result.orders.append(order)
                result.servers.append(pair)
                times = ", ".join(f"{side} {result.ms[side][-1]:.4f} ms" for side in order)
                progress(f"gate: round {number}/{count} (servers {pair}): {times}")
    return result


@contextmanager
def _side_servers(trees: dict[str, Path], overrides: list[str]) -> Iterator[dict[str, SideServer]]:
    """A worker server per side, started together, ready once both composed the job's config; stopped after."""
    servers: dict[str, SideServer] = {}
    try:
        for side, tree in trees.items():
            servers[side] = SideServer(side, tree, overrides)
        for server in servers.values():
            server.ready()
        yield servers
    finally:
        for server in servers.values():
            server.close()
