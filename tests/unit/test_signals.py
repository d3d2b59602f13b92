"""The first stop names the run's reason; a stop once the work is recorded is dropped until new work starts."""

from __future__ import annotations

import signal
import sys
import weakref

import pytest

from runner import signals
from runner.signals import Interrupted, ignore_later_stops, stop_on_signals


@pytest.fixture
def fresh_stops(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's own stop state, whatever earlier tests did; the handlers come back with conftest's fixture."""
    for state, fresh in [("_pending", []), ("_holds", [0]), ("_stopped", [False]), ("_swallowed", []),
                         ("_too_late", [False])]:  # fmt: skip
        monkeypatch.setattr(signals, state, fresh)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)


@pytest.mark.usefixtures("fresh_stops")
def test_a_stop_after_the_work_is_recorded_is_dropped_until_new_work_starts() -> None:
    stop_on_signals()
    ignore_later_stops()
    # ignored, not handled: the interpreter's shutdown puts a Python handler back to the default (exit 130)
    assert [signal.getsignal(each) for each in signals.STOP_SIGNALS] == [signal.SIG_IGN, signal.SIG_IGN]
    signal.raise_signal(signal.SIGTERM)  # dropped: nothing is left to stop
    stop_on_signals()
    with pytest.raises(Interrupted, match="SIGTERM"):
        signal.raise_signal(signal.SIGTERM)


@pytest.mark.usefixtures("fresh_stops")
def test_a_stop_python_dropped_keeps_its_reason_when_a_second_signal_raises_it() -> None:
    """A Ctrl-C dropped in a weakref callback, then the sweep's SIGTERM before a safe point: the run says SIGINT."""
    stop_on_signals()

    class Thing: ...

    thing = Thing()
    ref = weakref.ref(thing, lambda _: signal.raise_signal(signal.SIGINT))
    del thing  # the stop is raised inside the callback, where Python drops it
    assert ref() is None
    with pytest.raises(Interrupted, match="SIGINT"):
        signal.raise_signal(signal.SIGTERM)
