"""A gate --against stopped by Ctrl-C says so in one line and leaves no worktree behind."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from benchmarks.git_copy import commit, git
from runner import gate
from runner.signals import Interrupted


def test_a_ctrl_c_in_the_rounds_says_what_was_stopped_and_leaves_no_worktree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / gate.SERVER_FILE).parent.mkdir(parents=True)
    (tmp_path / gate.SERVER_FILE).touch()  # what a baseline needs before its rounds start
    git(tmp_path, "init", "-q")
    commit(tmp_path, "a project with the side server")
    monkeypatch.setattr(gate, "PROJECT_TREE", tmp_path)

    def ctrl_c(trees: dict[str, Path], *args: object) -> None:
        assert all(tree.is_dir() for tree in trees.values())
        raise Interrupted(signal.SIGINT)

    monkeypatch.setattr(gate, "run_rounds", ctrl_c)
    assert gate.main(["--against", "HEAD", "--fail-above", "5"]) == 130
    assert capsys.readouterr().err == (
        "gate: stopped by SIGINT, no verdict: both sides' servers stopped, their worktrees removed\n"
    )
    assert git(tmp_path, "worktree", "list").count("\n") == 1
