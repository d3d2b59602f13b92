"""The gate that runs both sides: a commit's worktree against this tree, round by round, in one invocation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.git_copy import commit, git, project_repository
from runner import gate

# tiny steps: the slower commit's fifty extra ops a step make it several times slower even on a busy host
JOB = ["+workload=rmsnorm_naive", "backend=cpu", "workload.hidden=16", "workload.batch=1", "workload.seq_len=8",
       "measure=quick"]  # fmt: skip
# a margin the slowdown clears many times over and the same code never does
FAIL_ABOVE = "50"
NAIVE_STEP = "        variance = (x * x).mean(-1, keepdim=True)\n"


@pytest.fixture(scope="module")
def slower_commit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the project in git, then a commit whose naive RMSNorm does fifty more ops a step."""
    repo = project_repository(tmp_path_factory.mktemp("gated"))
    source = repo / "workloads" / "rmsnorm.py"
    assert NAIVE_STEP in source.read_text()
    slower = "        for _ in range(50):  # fifty more ops a step\n            x = x + 0.0\n" + NAIVE_STEP
    source.write_text(source.read_text().replace(NAIVE_STEP, slower, 1))
    commit(repo, "the naive RMSNorm does fifty more ops a step")
    return repo


def run_gate(repo: Path, rev: str, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m runner.gate --against REV ...` from `repo`'s tree, as CI would run it there."""
    command = [sys.executable, "-m", "runner.gate", "--against", rev, "--fail-above", FAIL_ABOVE, "--format", "json",
               "--seed", "7", *args]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(repo)}
    return subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True, timeout=600)


def worktrees(repo: Path) -> int:
    return git(repo, "worktree", "list").count("\n")


def test_a_slower_commit_fails_against_its_parent(slower_commit: Path) -> None:
    gated = run_gate(slower_commit, "HEAD~1", "--rounds", "3", *JOB)
    assert gated.returncode == gate.REGRESSION_EXIT, gated.stdout + gated.stderr
    (row,) = json.loads(gated.stdout)
    assert row["verdict"] == "REGRESSION: slower by more than 50%"
    assert len(row["baseline rounds ms"]) == len(row["job rounds ms"]) == 3
    assert min(row["job rounds ms"]) > max(row["baseline rounds ms"])
    assert [sorted(order) for order in row["orders"]] == [["baseline", "candidate"]] * 3
    assert row["servers"] == [1, 2, 3]  # both sides' servers started afresh each round: the test pairs the pairs
    assert row["turns"] is True and row["test"] == "paired, 3 rounds on 3 server pairs, in turns"
    assert "gate: servers 3: both sides' servers start afresh for rounds 3-3" in gated.stderr
    assert "gate: round 3/3 (servers 3):" in gated.stderr
    assert worktrees(slower_commit) == 1  # the baseline's worktree is gone


def test_a_commit_against_itself_passes(slower_commit: Path) -> None:
    gated = run_gate(slower_commit, "HEAD", "--rounds", "2", *JOB)
    assert gated.returncode == 0, gated.stdout + gated.stderr
    (row,) = json.loads(gated.stdout)
    assert not row["verdict"].startswith("REGRESSION")
    assert worktrees(slower_commit) == 1


def test_a_baseline_whose_server_cannot_take_turns_runs_one_worker_after_the_other(tmp_path: Path) -> None:
    repo = project_repository(tmp_path / "before-turns")
    server = repo / "runner" / "execute" / "serve.py"
    current = server.read_text()
    ready = '{"ready": True, "turns": backend.traits.workers_take_turns}'
    assert ready in current
    server.write_text(current.replace(ready, '{"ready": True}'))  # what a server from before turns says
    commit(repo, "a server that cannot take turns")
    server.write_text(current)  # the candidate, uncommitted, can
    gated = run_gate(repo, "HEAD", "--rounds", "2", *JOB)
    assert gated.returncode == 0, gated.stdout + gated.stderr
    (row,) = json.loads(gated.stdout)
    assert row["turns"] is False and row["test"].endswith(", one worker after the other")
    assert len(row["baseline rounds ms"]) == len(row["job rounds ms"]) == 2


def test_the_candidate_is_the_checkout_as_it_is_uncommitted_and_untracked_files_too(tmp_path: Path) -> None:
    repo = project_repository(tmp_path / "dirty")
    (repo / "workloads" / "slower_step.py").write_text(  # untracked, and only the uncommitted edit imports it
        "def slower(x):\n    for _ in range(50):  # fifty more ops a step\n        x = x + 0.0\n    return x\n"
    )
    source = repo / "workloads" / "rmsnorm.py"
    source.write_text(source.read_text().replace(NAIVE_STEP, "        x = slower(x)\n" + NAIVE_STEP, 1))
    source.write_text(
        source.read_text().replace("import torch\n", "import torch\n\nfrom workloads.slower_step import slower\n", 1)
    )
    status = git(repo, "status", "--porcelain")
    gated = run_gate(repo, "HEAD", "--rounds", "3", *JOB)
    assert gated.returncode == gate.REGRESSION_EXIT, gated.stdout + gated.stderr
    assert git(repo, "status", "--porcelain") == status  # the user's index and files as they were
    assert worktrees(repo) == 1


def test_a_candidate_whose_output_is_nan_fails_whatever_its_time(tmp_path: Path) -> None:
    """The same ops a step, the root of a negative: each side's first worker checks the output, the candidate's NaN."""
    repo = project_repository(tmp_path / "nan")
    source = repo / "workloads" / "rmsnorm.py"
    normed = "        return x * torch.rsqrt(variance + self.eps) * self.weight\n"
    assert normed in source.read_text()
    source.write_text(source.read_text().replace(normed, normed.replace("+ self.eps", "- 1e30"), 1))
    gated = run_gate(repo, "HEAD", "--rounds", "2", *JOB)
    assert gated.returncode == gate.REGRESSION_EXIT, gated.stdout + gated.stderr
    (row,) = json.loads(gated.stdout)
    elements = int(JOB[3].split("=")[1]) * int(JOB[4].split("=")[1]) * int(JOB[2].split("=")[1])
    assert row["checks"][:2] == [
        f"output: NOT FINITE ({elements} of {elements} elements are NaN or infinite); the baseline's finite",
        "accuracy: FAILED (max_rel_err nan against tolerance 1e-05 for float32); the baseline's pass",
    ]
    assert row["checks"][2].startswith("first call: ")
    assert "gate: candidate: a first worker (fills the compile caches, checks the output; not timed)" in gated.stderr
    assert worktrees(repo) == 1


def test_a_side_that_fails_is_named_in_one_line(slower_commit: Path) -> None:
    gated = run_gate(slower_commit, "HEAD", "+workload=no_such_workload")
    assert gated.returncode == gate.INCOMPLETE_EXIT
    assert gated.stderr.startswith("gate: not passed: baseline: ")
    assert "no_such_workload" in gated.stderr
    assert gated.stderr.count("\n") == 1, gated.stderr
    assert worktrees(slower_commit) == 1


def test_a_commit_that_does_not_resolve_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert gate.main(["--against", "no-such-commit", "--fail-above", "5"]) == gate.NOT_FOUND_EXIT
    assert (
        capsys.readouterr().err
        == f"error: --against no-such-commit: no such commit in the repository of {gate.PROJECT_TREE}\n"
    )


def test_a_tree_outside_git_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gate, "PROJECT_TREE", tmp_path)
    assert gate.main(["--against", "HEAD", "--fail-above", "5"]) == gate.NOT_FOUND_EXIT
    assert capsys.readouterr().err == f"error: --against HEAD: {tmp_path} is not in a git checkout\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param(["--against", "HEAD", "--baseline", "v1"], "--against (run both sides) and --baseline", id="both"),
        pytest.param(["--against", "HEAD", "--runs", "abc"], "--against (run both sides) and --runs", id="runs"),
        pytest.param(["--baseline", "v1", "--rounds", "3"], "--rounds: only with --against", id="rounds"),
        pytest.param(["--baseline", "v1", "+workload=matmul"], "job overrides: only with --against", id="overrides"),
        pytest.param([], "give --baseline REF (stored runs) or --against REV", id="neither"),
        pytest.param(["--against", "HEAD", "--rounds", "1"], "--rounds 1: give at least 2", id="one-round"),
    ],
)
def test_options_of_the_two_modes_do_not_mix(args: list[str], error: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:
        gate.main([*args, "--fail-above", "5"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {error}")
    assert err.count("\n") == 1, err
