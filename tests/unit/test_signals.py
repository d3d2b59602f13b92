"""A stop that comes once the work is recorded is dropped, and counts again for the next piece of work."""

from __future__ import annotations

import signal
import sys

import pytest

from runner import signals
from runner.signals import Interrupted, ignore_later_stops, stop_on_signals


def test_a_stop_after_the_work_is_recorded_is_dropped_until_new_work_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    for state, fresh in [("_pending", []), ("_holds", [0]), ("_stopped", [False]), ("_swallowed", []),
                         ("_too_late", [False])]:  # fmt: skip
        monkeypatch.setattr(signals, state, fresh)  # this process's own stops, whatever earlier tests did
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # the handlers come back with conftest's fixture
    stop_on_signals()
    ignore_later_stops()
    signal.raise_signal(signal.SIGTERM)  # dropped: nothing is left to stop
    stop_on_signals()
    with pytest.raises(Interrupted, match="SIGTERM"):
        signal.raise_signal(signal.SIGTERM)
