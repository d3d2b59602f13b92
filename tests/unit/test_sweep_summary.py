"""What a stopped sweep says it left (the jobs it closed, those it kept from starting, or that none was scheduled),
and that a sweep's folder check survives a sweep started beside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runner.callbacks import check_writable_dir
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


def test_a_sweep_beside_another_creates_its_folder_though_the_other_removes_a_parent_midway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two sweeps started together in one folder: each probe removes the empty parents it created, and the other's
    mkdir then met a parent gone (`cannot be created: No such file or directory`, seen under CI's load)."""
    target = tmp_path / "outputs" / "sweeps" / "b"
    mkdir, vanished = Path.mkdir, []

    def parent_removed_once(self: Path, *args: Any, **kwargs: Any) -> None:
        if self == target and not vanished:  # the other sweep's clean-up, between our parents and our folder
            vanished.append(self)
            raise FileNotFoundError(2, "No such file or directory", str(self))
        mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", parent_removed_once)
    check_writable_dir("hydra.sweep.dir", str(target))
    assert vanished == [target]
