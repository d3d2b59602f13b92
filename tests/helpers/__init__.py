"""Helpers the tests import: the repository root, composed configs, store reads, a real MLflow server."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runner import CONF_DIR
from runner.compose import compose_config as compose_cfg
from runner.job import JobInfo

REPO = CONF_DIR.parent
HELPERS = Path(__file__).resolve().parent
STANDIN = HELPERS / "neuron_standin"
# PATH's head for the stand-in's tools: its bin/, then this Python's folder, so that their
# `python3` is this one (the stand-in neuron-explorer writes Parquet with its pyarrow)
STANDIN_PATH = os.pathsep.join([str(STANDIN / "bin"), str(Path(sys.executable).parent)])
TRACES = HELPERS / "data" / "traces"
__all__ = [
    "HELPERS", "REPO", "STANDIN", "STANDIN_PATH", "TRACES", "RunnerInProcess", "all_runs", "compose_cfg", "job_for",
    "serve_mlflow",
]  # fmt: skip
# the `runner_in_process` fixture (tests/conftest.py): `python -m runner ARGS` in the pytest process
RunnerInProcess = Callable[..., "subprocess.CompletedProcess[str]"]


def all_runs(uri: str | None = None, experiment: str | None = None) -> list[Any]:
    """Every run in every experiment (or the one named) of the store at `uri` (default: the current tracking URI)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    experiments = client.search_experiments()
    ids = [e.experiment_id for e in experiments if experiment in (None, e.name)]
    return list(client.search_runs(ids)) if ids else []


def job_for(tmp_path: Path, name: str = "test_job") -> JobInfo:
    """A JobInfo whose outputs land in tmp_path."""
    return JobInfo(run_name=name, workload_name=name, overrides=[], output_dir=tmp_path / "out")


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
