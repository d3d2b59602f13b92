"""Fixtures of the system layer: what several test files would otherwise each start for themselves."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers import serve_mlflow


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One real `mlflow server` on loopback for the session, over its own SQLite store (a start takes seconds).

    Tests share it, so each logs to an experiment of its own (`tracking.experiment=`) and reads
    that one back (`all_runs(url, experiment)`).
    """
    root = tmp_path_factory.mktemp("mlflow_server")
    with serve_mlflow(f"sqlite:///{root / 'server.db'}", root / "artifacts") as url:
        yield url
