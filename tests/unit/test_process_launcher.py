"""The process launchers' configs in the runner's, and how they hand a job's process its task function."""

from __future__ import annotations

import importlib.util
import json
import math
import signal
import sys
import types
from pathlib import Path

import pytest
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import ConfigCompositionException
from hydra.utils import instantiate
from omegaconf import DictConfig

from hydra_plugins.runner_launcher import process_launcher
from hydra_plugins.runner_launcher.process_launcher import InProcessLauncher, ProcessLauncher, portable
from runner.compose import refusal
from runner.config import ConfigError
from runner.sweep.jobs import IN_PROCESS_LAUNCHER
from tests.helpers import compose_cfg


@pytest.mark.parametrize(("launcher", "jobs"), [("isolated", 1), ("parallel", 0)])
def test_each_launcher_composes_into_the_runners_config_with_typed_keys(launcher: str, jobs: int) -> None:
    chosen = ["+workload=rmsnorm_naive", f"hydra/launcher={launcher}"]
    cfg = compose_cfg(*chosen, "hydra.launcher.timeout_s=5", with_hydra=True)
    made = instantiate(cfg.hydra.launcher)
    assert (made.jobs, made.timeout_s) == (jobs, 5)
    with pytest.raises(ConfigCompositionException) as refused:
        compose_cfg(*chosen, "hydra.launcher.jobs=two", with_hydra=True)
    assert refusal(refused.value) == (  # the line `python -m runner` prints
        "Error merging override hydra.launcher.jobs=two; Value 'two' of type 'str' could not be converted to Integer"
    )


@pytest.mark.parametrize(
    ("launcher", "key"), [(ProcessLauncher, "jobs"), (ProcessLauncher, "timeout_s"), (InProcessLauncher, "timeout_s")]
)
def test_a_launcher_refuses_a_limit_that_would_hang_or_kill_every_job_in_any_hydra_app(
    launcher: type[InProcessLauncher | ProcessLauncher], key: str
) -> None:
    with pytest.raises(ConfigError, match=f"^hydra.launcher.{key} must be .*, got -1$"):
        launcher(**{key: -1})


def test_the_runners_sweeps_launch_in_process_by_default() -> None:
    """Its own in-process launcher, which times the jobs in rounds first (Hydra's basic one does not)."""
    launcher = compose_cfg("+workload=rmsnorm_naive", with_hydra=True).hydra.launcher
    assert launcher._target_ == IN_PROCESS_LAUNCHER == f"{InProcessLauncher.__module__}.{InProcessLauncher.__name__}"


def run(cfg: DictConfig) -> int:
    return 1


@pytest.mark.parametrize(("spec_name", "by_name"), [("runner.__main__", True), (None, False)], ids=["-m", "script"])
def test_a_task_of_a_python_m_main_goes_by_name_and_any_other_as_itself(
    monkeypatch: pytest.MonkeyPatch, spec_name: str | None, by_name: bool
) -> None:
    # `python -m runner` runs runner/__main__.py as __main__ with its spec, which spawn does not import again
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.util.find_spec(spec_name) if spec_name else None
    main.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "__main__", main)
    assert portable(run) == (("runner.__main__", "run") if by_name else run)

    def closure(cfg: DictConfig) -> int:
        return 2

    assert portable(closure) is closure  # not an attribute of __main__: cloudpickle copies it


def test_hydra_lists_each_launcher_once_under_its_own_name() -> None:
    """`python -m runner --info plugins` lists the launchers Hydra discovers, by class name: the runner's
    Slurm launcher was listed as a second and third `SlurmLauncher` beside the stock one."""
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    names = [launcher.__name__ for launcher in Plugins.instance().discover(Launcher)]
    assert len(names) == len(set(names)), names
    assert {"InProcessLauncher", "ProcessLauncher", "TolerantSlurmLauncher", "SlurmLauncher"} <= set(names)
    target = compose_cfg("+workload=rmsnorm_naive", "hydra/launcher=slurm", with_hydra=True).hydra.launcher._target_
    module, name = target.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name).__name__ == name == "TolerantSlurmLauncher"


def killed_job(tmp_path: Path, runner_sweep: bool) -> JobReturn:
    """What the launcher returns for job 0, whose process died from SIGKILL without leaving a result."""
    sweep = [f"hydra.sweep.dir={tmp_path}", "hydra.sweep.subdir=0", "tracking.enabled=false"]
    config = compose_cfg("+workload=rmsnorm_naive", *sweep, with_hydra=True)
    launcher = ProcessLauncher()
    launcher.runner_sweep = runner_sweep
    return launcher._collect(tmp_path / "no-result", config, -signal.SIGKILL, timed_out=False)


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_dead_job_in_the_runners_sweep_is_a_nan_result_and_its_status_says_why(tmp_path: Path) -> None:
    """NaN, as for a job that raised: an optimizing sweeper would take a 0.0 as the best result of the sweep."""
    died = killed_job(tmp_path, runner_sweep=True)
    assert died.status == JobStatus.COMPLETED and math.isnan(died.return_value)
    status = json.loads((tmp_path / "0" / "job_status.json").read_text())
    assert (status["status"], status["error"]) == ("FAILED", "died from signal SIGKILL")


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_dead_job_fails_in_any_other_hydra_app(tmp_path: Path) -> None:
    """A plain Hydra app has no summary to count the death: the job FAILED, its value raising why, as Hydra's do."""
    died = killed_job(tmp_path, runner_sweep=False)
    assert died.status == JobStatus.FAILED
    with pytest.raises(RuntimeError, match="^job 0 died from signal SIGKILL$") as failed:
        died.return_value  # noqa: B018  (reading it raises the job's error)
    # looked up now: Hydra runs plugin modules again as it composes, so the class imported above is not the one raised
    assert type(failed.value) is process_launcher.JobDied
    assert not (tmp_path / "0").exists()  # the runner's status file is the runner's sweep's only
