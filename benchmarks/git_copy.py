"""A throwaway git repository holding a copy of this project: what the gate's --against runs in (benchmarks, tests)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from runner import CONF_DIR

# what a job needs of the project: its code, its config, the launchers Hydra loads, the package's metadata
PROJECT = ("runner", "workloads", "conf", "hydra_plugins", "pyproject.toml")


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its output."""
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def commit(repo: Path, message: str) -> None:
    """Commit everything in `repo` as it is (with an author of its own, whatever the user's git config says)."""
    git(repo, "add", "-A")
    author = ["-c", "user.name=runner tests", "-c", "user.email=tests@localhost", "-c", "commit.gpgsign=false"]
    git(repo, *author, "commit", "-q", "-m", message)


def copy_project(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    """A copy of the project (and `extra` paths of it) at `dest`, without its bytecode caches."""
    for name in (*PROJECT, *extra):
        source = CONF_DIR.parent / name
        if source.is_dir():
            shutil.copytree(source, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def project_repository(dest: Path, extra: tuple[str, ...] = ()) -> Path:
    """A git repository at `dest` with a copy of the project (and `extra` paths of it), committed once."""
    copy_project(dest, extra)
    git(dest, "init", "-q")
    commit(dest, "the project")
    return dest
