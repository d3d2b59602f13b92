"""The MLflow store itself: checked before use, created and migrated by one process at a time (two at once collide)."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import SplitResult, urlsplit
from urllib.request import getproxies, proxy_bypass

from runner.config import ConfigError, TrackingConfig
from runner.secrets import redact
from runner.signals import signals_held

if TYPE_CHECKING:  # mlflow loads only where a store is used, not for `--help`
    from mlflow import MlflowClient

_prepared: set[str] = set()  # URIs this process has already prepared
SQLITE_FULL = "database or disk is full"  # what SQLite says when the disk under the store is full
# the port a server URI without one is reached at
_DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}
CONNECT_TIMEOUT_S = 5.0  # for a server to accept a connection before the store is refused (MLflow retries minutes)


class StoreFull(RuntimeError):
    """The disk under the store is full: nothing more, not even a run's end, can be written."""


def mlflow_client(store: TrackingConfig | str) -> MlflowClient:
    """A client of the store (a job's tracking config, or a URI a command was given): the runner makes them only here.

    Each names its store: none falls back on the URI MLflow holds for the process, which a job sets for its own run.
    """
    from mlflow import MlflowClient

    return MlflowClient(store if isinstance(store, str) else store.uri)


def sqlite_path(uri: str) -> Path | None:
    """The file of a sqlite:/// URI (relative to the working directory), None for other stores."""
    parts = urlsplit(uri)
    if parts.scheme != "sqlite":
        return None
    return Path(parts.path[1:] if parts.path.startswith("//") else parts.path.lstrip("/") or "mlflow.db")


@contextmanager
def store_lock(uri: str) -> Iterator[None]:
    """Hold an exclusive lock on `<store>.lock` while the block runs (no-op for a server, which owns its store)."""
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


def check_usable(uri: str) -> None:
    """Refuse with a ConfigError, without loading MLflow, a store no job could log to; each check takes seconds."""
    _check_writable(uri)
    check_intact(uri)
    _check_reachable(uri)
    _check_driver(uri)


def _check_writable(uri: str) -> None:
    """Refuse a SQLite store that cannot be created or written (MLflow would retry for minutes)."""
    path = sqlite_path(uri)
    if path is None:
        return
    folder, shown = path.parent, redact(uri)
    if path.exists() and not path.is_file():  # SQLite would fail each job after its retries with "disk I/O error"
        what = "a folder" if path.is_dir() else "not a regular file"
        raise ConfigError(f"tracking.uri={shown}: {path} is {what}, not a SQLite store: name a database file")
    if not path.exists():
        if not (folder.is_dir() and os.access(folder, os.W_OK)):
            raise ConfigError(f"tracking.uri={shown}: the store cannot be created: {folder} is not a writable folder")
    # SQLite writes its journal, and the runner its lock, beside the database
    elif not (os.access(path, os.W_OK) and os.access(folder, os.W_OK)):
        raise ConfigError(f"tracking.uri={shown}: the store cannot be written: {path} or its folder is read-only")


def check_intact(uri: str) -> None:
    """Refuse a SQLite store that is not a database or has damaged pages (MLflow would fail with a traceback).

    `PRAGMA quick_check` reads every page, so its cost grows with the file; a store another process
    is writing just then is not waited for, nor judged.
    """
    path = sqlite_path(uri)
    if path is None or not path.is_file():
        return
    try:
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0)) as db:
            ((found,),) = db.execute("PRAGMA quick_check(1)").fetchall()
    except sqlite3.OperationalError:  # busy or locked: says nothing about its pages
        return
    except sqlite3.DatabaseError as err:  # not a database, or a page it needs to open is damaged
        found = str(err)
    if found != "ok":
        raise ConfigError(
            f"tracking.uri={redact(uri)}: the store {path} is damaged ({' '.join(found.split())}): "
            "restore it from a backup, or move it aside to start a new store"
        )


def _check_driver(uri: str) -> None:
    """Refuse a database URI whose SQLAlchemy driver is not installed (each job would fail with a traceback)."""
    if urlsplit(uri).scheme.split("+")[0] not in ("postgresql", "mysql", "mssql"):
        return
    from sqlalchemy.engine import make_url

    url = make_url(uri)
    try:
        url.get_dialect().import_dbapi()
    except ModuleNotFoundError as err:
        raise ConfigError(
            f"tracking.uri={redact(uri)}: the {url.drivername} driver is not installed (no module {err.name!r}): "
            f"install it, or name an installed driver in the URI ({url.get_backend_name()}+<driver>://)"
        ) from None


def _check_reachable(uri: str) -> None:
    """Refuse a server URI nothing accepts a connection at within seconds; one through a proxy or socket is let be."""
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+")[0]
    if scheme not in _DEFAULT_PORTS or not parts.hostname or _not_direct(parts, scheme):
        return
    try:
        address = (parts.hostname, parts.port or _DEFAULT_PORTS[scheme])
    except ValueError:  # a port that is not a number
        raise ConfigError(f"tracking.uri={redact(uri)}: its port is not a number") from None
    try:
        socket.create_connection(address, timeout=CONNECT_TIMEOUT_S).close()
    except OSError as err:
        why = err.strerror or f"no answer within {CONNECT_TIMEOUT_S:g} s"
        raise ConfigError(
            f"tracking.uri={redact(uri)}: nothing answers at {address[0]}:{address[1]} ({why}); "
            "start the tracking server or correct the URI"
        ) from None


def _not_direct(parts: SplitResult, scheme: str) -> bool:
    """True when the client reaches the store another way than a TCP connection to its host and port."""
    if scheme in ("http", "https"):
        return scheme in getproxies() and not proxy_bypass(parts.hostname or "")
    return "unix_socket=" in parts.query or "host=/" in parts.query


def _check_migrated(uri: str) -> None:
    """Refuse a SQLite store an interrupted migration left with `_alembic_tmp_*` tables (call under the lock)."""
    path = sqlite_path(uri)
    if path is None or not path.exists():
        return
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    if leftovers := sorted(name for (name,) in rows if name.startswith("_alembic_tmp_")):
        raise ConfigError(
            f"tracking.uri={redact(uri)}: the store was left half-migrated by an interrupted MLflow schema migration "
            f"(tables {', '.join(leftovers)}); back up {path}, then drop each leftover whose original table exists "
            f"(sqlite3 {path} 'DROP TABLE {leftovers[0]}') or rename it to the original name where that is missing, "
            "and run again"
        )


def _create_sqlite(path: Path, uri: str) -> None:
    """Create and migrate a new SQLite store under a temporary name, then rename it; call under the store's lock.

    A disk filling up mid-migration would otherwise leave a store with an older schema on which every later run
    fails (`table spans already exists`); here it raises StoreFull and leaves nothing behind.
    """
    handle, draft = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".creating", dir=path.parent)
    os.close(handle)
    try:
        mlflow_client(f"sqlite:///{Path(draft).resolve()}").search_experiments(max_results=1)
        os.replace(draft, path)
    except Exception as err:
        Path(draft).unlink(missing_ok=True)
        if SQLITE_FULL in str(err) or (isinstance(err, OSError) and err.errno == errno.ENOSPC):
            raise StoreFull(
                f"tracking.uri={redact(uri)}: the store could not be created, its disk is full ({SQLITE_FULL}); "
                "nothing was left behind: free space where it lives and run again"
            ) from err
        raise


def prepare_store(uri: str) -> None:
    """Create and migrate the store once, a process at a time; raises ConfigError (broken) or StoreFull (disk full)."""
    if uri in _prepared:
        return
    check_usable(uri)
    # a migration cut short by SIGINT/SIGTERM leaves the store broken: signals wait until it is done
    with store_lock(uri), signals_held():
        _check_migrated(uri)
        path = sqlite_path(uri)
        if path is not None and not path.exists():
            _create_sqlite(path, uri)
        # MLflow migrates an older schema (and creates a database server's tables) on first use
        mlflow_client(uri).search_experiments(max_results=1)
    _prepared.add(uri)
