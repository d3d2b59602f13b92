"""Shared fixtures: composed configs, a migrated MLflow store per test, job descriptions."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from runner import CONF_DIR
from runner.compose import compose_config as compose_cfg
from runner.config import JobInfo
from runner.tracking import PARENT_RUN_ENV

REPO = CONF_DIR.parent
__all__ = ["REPO", "all_runs", "compose_cfg", "job_for", "serve_mlflow"]


def all_runs(uri: str | None = None) -> list[Any]:
    """Every run in every experiment of the store at `uri` (default: the current tracking URI)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    return list(client.search_runs([e.experiment_id for e in client.search_experiments()]))


def job_for(tmp_path: Path, name: str = "test_job") -> JobInfo:
    """A JobInfo whose outputs land in tmp_path."""
    return JobInfo(run_name=name, workload_name=name, overrides=[], output_dir=tmp_path / "out")


@pytest.fixture(scope="session")
def migrated_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MLflow SQLite store with its schema migrated once per session (migration takes seconds)."""
    import mlflow

    path = tmp_path_factory.mktemp("store") / "mlflow.db"
    mlflow.MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture(autouse=True, scope="session")
def calibration_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Keep the CPU peak calibration cache out of the user's home during tests."""
    cache = tmp_path_factory.mktemp("xdg_cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("XDG_CACHE_HOME", str(cache))
        yield cache


@pytest.fixture(autouse=True)
def tracking_uri(tmp_path: Path, migrated_store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Point MLflow at a fresh copy of the migrated store, so no test touches ./mlflow.db."""
    db = tmp_path / "mlflow.db"
    shutil.copy(migrated_store, db)
    uri = f"sqlite:///{db}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv(PARENT_RUN_ENV, raising=False)
    import mlflow

    # the runner calls mlflow.set_tracking_uri, which outlives the env var: reset it per test
    mlflow.set_tracking_uri(uri)
    yield uri
    while mlflow.active_run() is not None:
        mlflow.end_run()


@contextmanager
def serve_mlflow(store_uri: str, artifacts: Path) -> Iterator[str]:
    """Run a real `mlflow server` on a free loopback port; yield its URL, stop it afterwards."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
         "--backend-store-uri", store_uri, "--artifacts-destination", str(artifacts), "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    try:
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2)
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "mlflow server did not start"
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
