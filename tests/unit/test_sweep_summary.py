"""What a stopped sweep says it left: the jobs it closed, those it kept from starting, or that none was scheduled."""

from __future__ import annotations

import pytest

from runner.sweep.summary import SweepSummary


@pytest.mark.parametrize(
    ("summary", "said"),
    [
        (SweepSummary(), "sweep stopped by a signal before its launcher scheduled a job: none ran"),
        (SweepSummary(killed=["0_a: interrupted by SIGINT"], not_run=["1_b"]),
         "sweep stopped by a signal: 1 job(s) in flight closed KILLED, the rest did not run"),
        (SweepSummary(not_run=["0_a", "1_b"]), "sweep stopped by a signal: no job was in flight, the rest did not run"),
        (SweepSummary(finished=["0_a", "1_b"]), "sweep stopped by a signal: no job was in flight, every job had ended"),
    ],
)  # fmt: skip
def test_a_stopped_sweep_says_what_it_left(summary: SweepSummary, said: str) -> None:
    assert summary.stopped_line() == said
