"""The MLflow store itself: created and migrated by one process at a time, checked before use.

MLflow creates and migrates a SQLite store on first use. Two processes doing that at once
collide (`table experiments already exists`, half-applied migrations that leave
`_alembic_tmp_*` tables behind), so the first use of a SQLite store takes an exclusive lock
on a file beside it. Server URIs need none: the server owns its store.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

from runner.config import ConfigError
from runner.secrets import redact
from runner.signals import signals_held

# URIs this process has already prepared
_prepared: set[str] = set()
# what SQLite says when the disk under the store is full
SQLITE_FULL = "database or disk is full"


class StoreFull(RuntimeError):
    """The disk under the store is full: nothing more, not even a run's end, can be written."""


def sqlite_path(uri: str) -> Path | None:
    """The file of a sqlite:/// URI (relative to the working directory), None for other stores."""
    parts = urlsplit(uri)
    if parts.scheme != "sqlite":
        return None
    return Path(parts.path[1:] if parts.path.startswith("//") else parts.path.lstrip("/") or "mlflow.db")


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock on `<store>.lock` while the block runs (no-op for a server)."""
    path = sqlite_path(uri)
    if path is None:
        yield
        return
    try:
        lock = open(path.with_name(path.name + ".lock"), "a")  # noqa: SIM115  (closed below, after unlocking)
    except OSError as err:
        raise ConfigError(f"tracking.uri={redact(uri)}: the store cannot be used here: {err.strerror}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def half_migrated_tables(path: Path) -> list[str]:
    """`_alembic_tmp_*` tables: the trace of a schema migration that was interrupted."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return sorted(name for (name,) in rows if name.startswith("_alembic_tmp_"))


def check_creatable(uri: str) -> None:
    """Refuse a SQLite store whose folder cannot hold it (MLflow would retry for minutes).

    Raises:
        ConfigError: naming tracking.uri.
    """
    path = sqlite_path(uri)
    if path is None or path.exists():
        return
    folder = path.parent
    if not (folder.is_dir() and os.access(folder, os.W_OK)):
        raise ConfigError(f"tracking.uri={redact(uri)}: the store cannot be created: {folder} is not a writable folder")


def check_migrated(uri: str) -> None:
    """Refuse a SQLite store that an interrupted schema migration left broken (call under the lock).

    Raises:
        ConfigError: naming tracking.uri and what to do.
    """
    path = sqlite_path(uri)
    if path is None or not path.exists():
        return
    shown = redact(uri)
    if leftovers := half_migrated_tables(path):
        raise ConfigError(
            f"tracking.uri={shown}: the store was left half-migrated by an interrupted MLflow schema migration "
            f"(tables {', '.join(leftovers)}); back up {path}, then drop each leftover whose original table exists "
            f"(sqlite3 {path} 'DROP TABLE {leftovers[0]}') or rename it to the original name where that is missing, "
            "and run again"
        )


def prepare_store(uri: str) -> None:
    """Create and migrate the store once, one process at a time; refuse a broken one.

    Raises:
        ConfigError: the store cannot be created, or is half-migrated.
    """
    if uri in _prepared:
        return
    from mlflow import MlflowClient

    check_creatable(uri)
    # a migration cut short by SIGINT/SIGTERM leaves the store broken: signals wait until it is done
    with store_lock(uri), signals_held():
        check_migrated(uri)
        MlflowClient(uri).search_experiments(max_results=1)  # creates and migrates on first use
    _prepared.add(uri)
