"""A job that an earlier job in the same process would make run on other settings is refused before it runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runner import experiment
from runner.config import ConfigError
from runner.config_loading import load_run_spec
from runner.job import SharedProcess
from tests.helpers import all_runs, compose_cfg, job_for


def run_job(folder: Path, *overrides: str) -> None:
    cfg = compose_cfg("backend=cpu", "+workload=rmsnorm_naive", "workload.hidden=16", "measure=quick", *overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    experiment.run_experiment(load_run_spec(cfg), job_for(folder), resolved)  # type: ignore[arg-type]


def test_a_cold_cache_job_after_another_job_is_refused_before_its_run(
    tmp_path: Path, tracking_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(experiment, "THIS_PROCESS", SharedProcess())  # this test's process, as a sweep's
    run_job(tmp_path / "first")
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=r"^measure.compile_cache=cold needs a process no job has measured in"):
        run_job(tmp_path / "second", "measure.compile_cache=cold", f"measure.compile_cache_dir={cache}")
    assert len(all_runs(tracking_uri)) == 1 and not cache.exists()  # no run, no cache folder
