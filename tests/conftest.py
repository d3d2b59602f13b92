"""Fixtures every layer shares: a migrated MLflow store per test, a check that no test wrote MLflow data into the
checkout, the calibration cache out of $HOME, the CLI run in this process for bad input, and each test's layer as a
marker (unit, integration, system: its folder), so `-m` selects by layer.

Plain helpers (all_runs, job_for, serve_mlflow, ...) live in tests/helpers, imported by name.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.signals import STOP_SIGNALS
from runner.tracking.run import PARENT_RUN_ENV
from tests.helpers import HELPERS, REPO, RunnerInProcess

LAYERS = ("unit", "integration", "system")
# what MLflow writes into the working directory, the checkout, when a store or an experiment is given no place
CHECKOUT_STORES = ("mlruns", "mlflow.db", "mlartifacts")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with the layer its folder names, so `make test` selects layers and smoke runs in one session."""
    for item in items:
        layer = item.path.parent.name
        if layer in LAYERS:
            item.add_marker(layer)


@pytest.fixture(autouse=True)
def torch_threads() -> Iterator[None]:
    """Torch's thread count as it was before each test: a job measured in this process sets its workers'."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None
    yield
    if torch is not None and threads is not None:
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def stop_handlers() -> Iterator[None]:
    """pytest's own SIGINT and SIGTERM handlers back after each test: a job run in this process installs the runner's,
    which drop a stop once the job is done (Ctrl-C would no longer stop pytest)."""
    handlers = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


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


def store_stamps() -> dict[Path, int]:
    """The modification times of the checkout's MLflow folders and files and of each experiment folder in them.

    A new run's folder changes its experiment folder's time, a new experiment's the store folder's: a
    few stats per test, however many runs a developer's own `make run` left there.
    """
    stamps = {}
    for path in (REPO / name for name in CHECKOUT_STORES):
        for item in [path, *(path.iterdir() if path.is_dir() else ())]:
            if item.exists():
                stamps[item] = item.stat().st_mtime_ns
    return stamps


@pytest.fixture(autouse=True)
def checkout_untouched(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that wrote MLflow data into the checkout.

    An experiment created without an artifact_location keeps its artifacts in ./mlruns of the
    process's working directory, the checkout here: a test's experiment that logs artifacts
    names a folder under tmp_path (the runner's own experiments are put beside their store).
    """
    before = store_stamps()
    yield
    after = store_stamps()
    changed = sorted(str(path.relative_to(REPO)) for path in after if after[path] != before.get(path))
    if changed:
        pytest.fail(f"{request.node.nodeid} wrote into the checkout: {', '.join(changed)}", pytrace=False)


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


@pytest.fixture
def runner_in_process(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> RunnerInProcess:
    """`python -m runner ARGS` called in this process, for bad input, where only the refusal is the point.

    Its exit status and output are the process's: the interpreter prints a SystemExit's message on
    stderr and exits 1, and the runner masks secrets in all it prints. The environment the runner
    sets for its jobs (HYDRA_FULL_ERROR, a sweep's id) is restored after. A fresh interpreter per
    refusal cost seconds each; one subprocess test (tests/system/test_cli.py) still proves a
    refusal has no traceback in a real process.
    """
    from runner.__main__ import cli
    from runner.secrets import redact

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        # what earlier tests in this process left to the collector warns now, not inside this run's output
        gc.collect()
        capsys.readouterr()
        monkeypatch.setattr(sys, "argv", ["runner", *args])
        environ, handlers, level = dict(os.environ), logging.root.handlers[:], logging.root.level
        code: int | str | None = 0
        try:
            cli()
        except SystemExit as stop:
            code = stop.code
        finally:  # Hydra configured logging for the job: its handlers go, pytest's come back
            for added in set(logging.root.handlers) - set(handlers):
                added.close()
            logging.root.handlers[:] = handlers
            logging.root.setLevel(level)
            os.environ.clear()
            os.environ.update(environ)
        out, err = capsys.readouterr()
        if isinstance(code, str):
            code, err = 1, f"{err}{code}\n"
        return subprocess.CompletedProcess(args, code or 0, redact(out), redact(err))

    return run


@pytest.fixture
def nki_standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """NKI on torch CPU tensors (tests/helpers/nki_standin), importable for one test."""
    monkeypatch.syspath_prepend(str(HELPERS / "nki_standin"))
    yield
    for name in [name for name in sys.modules if name == "nki" or name.startswith("nki.")]:
        del sys.modules[name]
