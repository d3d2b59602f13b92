"""Shared fixtures: composed configs, a migrated MLflow store per test, job descriptions."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from runner import CONF_DIR
from runner.config import JobInfo, register_schemas
from runner.tracking import PARENT_RUN_ENV

register_schemas()
REPO = CONF_DIR.parent


def compose_cfg(*overrides: str, with_hydra: bool = False) -> DictConfig:
    """Compose conf/ as `python -m runner <overrides>` would, without running anything."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONF_DIR)):
        return compose(config_name="config", overrides=list(overrides), return_hydra_config=with_hydra)


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
