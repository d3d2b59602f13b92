"""Turns between workers: the referee hands the turn round in order, and leaves out a worker that ends; a stretch
after a turn settles before it is timed."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest

from runner.measure import turns
from runner.measure.loop import MOST_SETTLE_CALLS, SETTLE_CALLS, settle
from runner.measure.turns import RefereedTurns, TurnsAddress, TurnsLost, give_turns, referee


def take_turns(
    path: str, name: str, parts: int, events: list[str], hang_up_after: int | None = None, part_s: float = 0.0
) -> None:
    """A worker of `parts` parts of `part_s` each, logged in its turn; it may hang up without saying it is done."""
    worker = RefereedTurns(TurnsAddress(path, name))
    try:
        for part in range(parts):
            worker.take()
            time.sleep(part_s)
            events.append(f"{name}{part}")
            if part + 1 == hang_up_after:
                worker._socket.close()  # as a worker that failed mid-way
                return
            worker.give()
        worker.finish()
    except (TurnsLost, OSError):  # the referee ended, or hung up on this worker
        worker._socket.close()
        events.append(f"{name} lost its referee")


def refereed(order: list[str], workers: list[tuple[str, int, int | None]]) -> list[str]:
    """What the workers logged, in the order they ran, with the referee handing turns in `order`."""
    events: list[str] = []
    with referee() as (path, listener):
        threads = [
            threading.Thread(target=take_turns, args=(path, name, parts, events, hang_up))
            for name, parts, hang_up in workers
        ]
        for thread in threads:
            thread.start()
        give_turns(listener, order)
        for thread in threads:
            thread.join(timeout=10)
    assert not Path(path).parent.exists()  # the referee's socket and its folder go with it
    return events


def test_the_referee_hands_the_turn_round_in_order_until_each_is_done() -> None:
    events = refereed(["b", "a"], [("a", 3, None), ("b", 5, None)])
    # one part at a time, the round's order first; the worker with parts left goes on alone
    assert events == ["b0", "a0", "b1", "a1", "b2", "a2", "b3", "b4"]


def test_a_worker_that_ends_without_saying_done_is_left_out() -> None:
    events = refereed(["a", "b"], [("a", 3, None), ("b", 3, 1)])
    assert events == ["a0", "b0", "a1", "a2"]


def test_a_worker_that_never_comes_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(turns, "CONNECT_TIMEOUT_S", 0.2)
    with referee() as (path, listener):
        events: list[str] = []
        alone = threading.Thread(target=take_turns, args=(path, "a", 1, events))
        alone.start()
        with pytest.raises(TimeoutError, match=r"^b: its worker did not come for its turns in 0\.2 s$"):
            give_turns(listener, ["a", "b"])
        alone.join(timeout=10)
    assert events == ["a lost its referee"]  # it hung up before any turn: the waiting worker stops


def test_a_worker_that_ended_before_it_came_is_left_out_at_once() -> None:
    # with the default timeout, waiting for "b" would take 120 s and raise
    with referee() as (path, listener):
        events: list[str] = []
        alone = threading.Thread(target=take_turns, args=(path, "a", 2, events))
        alone.start()
        give_turns(listener, ["b", "a"], ended=lambda name: name == "b")
        alone.join(timeout=10)
    assert events == ["a0", "a1"]


def test_a_worker_that_holds_its_turn_past_its_time_is_left_out_and_named() -> None:
    with referee() as (path, listener):
        events: list[str] = []
        hung = RefereedTurns(TurnsAddress(path, "b"))  # it comes, then never answers its turn
        fine = threading.Thread(target=take_turns, args=(path, "a", 3, events))
        fine.start()
        assert give_turns(listener, ["b", "a"], timeout_s=0.3) == {"b"}
        fine.join(timeout=10)
        hung._socket.close()
    assert events == ["a0", "a1", "a2"]  # the others went on


def test_a_worker_slow_in_every_turn_is_hung_once_its_turns_add_up_past_its_time() -> None:
    with referee() as (path, listener):
        events: list[str] = []
        slow = threading.Thread(target=take_turns, args=(path, "a", 20, events, None, 0.2))
        slow.start()
        assert give_turns(listener, ["a"], timeout_s=1.0) == {"a"}
        slow.join(timeout=10)
    parts = [event for event in events if event != "a lost its referee"]
    assert 2 <= len(parts) < 20  # each turn well within the limit, but not all of them


def settling_calls(times_ms: list[float], warm_ms: float, another_rank_cold: bool = False) -> int:
    """How many calls `settle` makes of a step whose calls take `times_ms` (the last repeated), against `warm_ms`."""
    calls = iter([*times_ms, *[times_ms[-1]] * MOST_SETTLE_CALLS])
    made = 0

    def timed_call() -> float:
        nonlocal made
        made += 1
        return next(calls)

    settle(timed_call, warm_ms, lambda cold: cold or another_rank_cold)
    return made


def test_a_stretch_after_another_workers_turn_is_settled_until_a_call_is_within_ten_percent_of_a_warm_one() -> None:
    # a cold stretch as this project's host showed one: 2.2x, then falling to the warm call's time
    assert settling_calls([2.2, 1.5, 1.2, 1.08, 1.0], warm_ms=1.0) == 4
    assert settling_calls([1.3, 1.12, 1.11, 1.09], warm_ms=1.0) == 4  # 1.11 is not within 10%; 1.09 is
    assert settling_calls([1.0], warm_ms=1.0) == SETTLE_CALLS == 2  # never fewer: the first touches of new memory
    assert settling_calls([1.0], warm_ms=math.inf) == SETTLE_CALLS  # no warm call known: the fewest
    # a layout that stays slow is timed as it is after at most 16 calls
    assert settling_calls([1.5], warm_ms=1.0) == MOST_SETTLE_CALLS == 16
    # ranks in lock step call on together: a warm rank calls on while another is cold
    assert settling_calls([1.0], warm_ms=1.0, another_rank_cold=True) == MOST_SETTLE_CALLS
