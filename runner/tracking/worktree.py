"""A commit's tree checked out beside this one while a block runs (the gate's baseline), and HEAD's commits in order."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class NoCheckout(ValueError):
    """The folder is not in a git checkout, or the revision names no commit; the message says which."""


# who the snapshot commit is by, whatever the user's git config holds (it is never on a branch)
_SNAPSHOT_AUTHOR = {"GIT_AUTHOR_NAME": "runner", "GIT_AUTHOR_EMAIL": "runner@localhost",
                   "GIT_COMMITTER_NAME": "runner", "GIT_COMMITTER_EMAIL": "runner@localhost"}  # fmt: skip


def _git(folder: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, env=env)


def commit_of(folder: Path, rev: str) -> str:
    """The full commit id `rev` names in the repository that holds `folder` (else NoCheckout)."""
    if _git(folder, "rev-parse", "--show-toplevel").returncode != 0:
        raise NoCheckout(f"--against {rev}: {folder} is not in a git checkout")
    found = _git(folder, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if found.returncode != 0:
        raise NoCheckout(f"--against {rev}: no such commit in the repository of {folder}")
    return found.stdout.strip()


def snapshot_of(folder: Path) -> str:
    """A commit of the checkout holding `folder` as it is now: uncommitted and untracked (not ignored) files too.

    Built in an index of its own, so the user's index, branches and stash stay as they were; the commit is on no
    branch (git's gc removes it in time).
    """
    head = commit_of(folder, "HEAD")
    top = _git(folder, "rev-parse", "--show-toplevel").stdout.strip()
    with tempfile.TemporaryDirectory(prefix="runner-index-") as scratch:
        env = {**os.environ, **_SNAPSHOT_AUTHOR, "GIT_INDEX_FILE": str(Path(scratch) / "index")}
        for step in [("read-tree", head), ("add", "--all"), ("write-tree",)]:
            done = _git(Path(top), *step, env=env)
            if done.returncode != 0:
                why = (done.stderr.strip() or f"exit status {done.returncode}").splitlines()[0]
                raise NoCheckout(f"the checkout's snapshot: git {step[0]} failed: {why}")
        tree = done.stdout.strip()
        made = _git(Path(top), "commit-tree", tree, "-p", head, "-m", "the checkout as the gate measured it", env=env)
    if made.returncode != 0:
        raise NoCheckout(f"the checkout's snapshot: git commit-tree failed: {made.stderr.strip().splitlines()[0]}")
    return made.stdout.strip()


@contextmanager
def checkout(folder: Path, commit: str) -> Iterator[Path]:
    """`folder` as it is in `commit`, in a temporary worktree removed (git's record too) however the block ends."""
    top = Path(_git(folder, "rev-parse", "--show-toplevel").stdout.strip())
    where = Path(tempfile.mkdtemp(prefix="runner-worktree-"))
    tree = where / "tree"
    try:
        added = _git(top, "worktree", "add", "--detach", str(tree), commit)
        if added.returncode != 0:
            why = (added.stderr.strip() or f"exit status {added.returncode}").splitlines()[0]
            raise NoCheckout(f"--against {commit[:12]}: git worktree add failed: {why}")
        yield tree / folder.resolve().relative_to(top.resolve())
    finally:
        _git(top, "worktree", "remove", "--force", str(tree))
        shutil.rmtree(where, ignore_errors=True)
        _git(top, "worktree", "prune")  # what a removal cut short left in the repository's records


def commits_oldest_first(folder: Path) -> list[str]:
    """The full ids of the commits HEAD descends from in the repository holding `folder`, parents before children."""
    listed = _git(folder, "rev-list", "--topo-order", "--reverse", "HEAD")
    if listed.returncode != 0:
        raise NoCheckout(f"--order commit: {folder} is not in a git checkout with a commit")
    return listed.stdout.split()
