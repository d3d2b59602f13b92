"""The isolated and parallel launchers as any Hydra app sees them: Hydra's own launcher test suites, and a job's
result and death, with a task function that is not the runner's.

The suites are the ones Hydra's joblib, submitit, ray and rq launchers run against themselves
(`hydra.test_utils.launcher_common_tests`); their fixtures (`hydra_sweep_runner`,
`hydra_restore_singletons`) come from Hydra's pytest plugin, which pytest loads by its entry point.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hydra.core.singleton import Singleton
from hydra.test_utils.launcher_common_tests import BatchedSweeperTestSuite, IntegrationTestSuite, LauncherTestSuite
from hydra.test_utils.test_utils import TSweepRunner
from hydra.version import VersionBase
from omegaconf import DictConfig

from hydra_plugins.runner_launcher import process_launcher

# Hydra's own pytest.ini ignores it too: the suites' apps leave version_base unset, so jobs change directory
pytestmark = pytest.mark.filterwarnings(
    "ignore:Future Hydra versions will no longer change working directory:UserWarning"
)
LAUNCHERS = [("inprocess", []), ("isolated", []), ("parallel", ["hydra.launcher.jobs=2"])]


@pytest.fixture(autouse=True)
def version_base_unset(hydra_restore_singletons: None) -> None:
    """Hydra's version_base as a fresh process has it: unset, which the suites' apps expect.

    It is process-wide: a runner app or a compose run earlier in this pytest process (version_base
    1.3) would make the suites' jobs stay in the working directory.
    """
    state = Singleton.get_state()
    state["instances"].pop(VersionBase, None)  # made afresh, unset, when next asked for (absent if none asked yet)
    Singleton.set_state(state)


def logging_as_hydra_tests(launcher: str) -> dict[str, Any]:
    """The task config the integration suite's apps run under: this launcher, Hydra's debug logging, no job log."""
    defaults = [{"override hydra/launcher": launcher}, {"override hydra/hydra_logging": "hydra_debug"}]
    return {"defaults": [*defaults, {"override hydra/job_logging": "disabled"}]}


@pytest.mark.parametrize(("launcher_name", "overrides"), LAUNCHERS)
class TestLauncherSuite(LauncherTestSuite):
    """Hydra's launcher suite: one and two jobs, a closure and a callable object as the task, custom resolvers."""


@pytest.mark.parametrize(
    ("launcher_name", "overrides"), [(name, [*extra, "hydra.sweeper.max_batch_size=2"]) for name, extra in LAUNCHERS]
)
class TestBatchedSweeperSuite(BatchedSweeperTestSuite):
    """Hydra's batched-sweep suite: six jobs in three batches, job numbers running on across batches."""


@pytest.mark.parametrize(
    ("task_launcher_cfg", "extra_flags"), [(logging_as_hydra_tests(name), ["-m"]) for name, _ in LAUNCHERS]
)
class TestIntegrationSuite(IntegrationTestSuite):
    """Hydra's integration suite: real apps in their own process, job names, sweep folders, paths."""


def sweep_of(runner: TSweepRunner, launcher: str, task: Any, tmp_path: Path, *overrides: str) -> Any:
    """A sweep of Hydra's test app over `+a=0,1`, with `task` as its task function."""
    return runner(
        calling_file=None,
        calling_module="hydra.test_utils.a_module",
        task_function=task,
        config_path="configs",
        config_name="compose.yaml",
        overrides=[f"hydra/launcher={launcher}", "+a=0,1", *overrides],
        temp_dir=tmp_path / "sweep",
    )


def is_job_died(error: BaseException) -> bool:
    """Whether `error` is the launcher's JobDied (looked up now: Hydra runs plugin modules again as it starts)."""
    return type(error) is process_launcher.JobDied


@pytest.mark.usefixtures("hydra_restore_singletons")
@pytest.mark.parametrize("launcher", ["isolated", "parallel"])
def test_return_values_come_back_as_the_job_returned_them(
    hydra_sweep_runner: TSweepRunner, launcher: str, tmp_path: Path
) -> None:
    def task(cfg: DictConfig) -> Any:
        return (cfg.a, {"pid": os.getpid()}, lambda: cfg.a + 10)

    with sweep_of(hydra_sweep_runner, launcher, task, tmp_path) as sweep:
        returned = [ret.return_value for ret in sweep.returns[0]]
    assert [type(value) for value in returned] == [tuple, tuple]  # not lists, as through JSON
    assert [(a, closure()) for a, _, closure in returned] == [(0, 10), (1, 11)]
    assert os.getpid() not in {info["pid"] for _, info, _ in returned}  # each ran in a process of its own


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_a_value_that_cannot_be_pickled_fails_its_job_saying_so(
    hydra_sweep_runner: TSweepRunner, tmp_path: Path
) -> None:
    def task(cfg: DictConfig) -> Any:
        return (i for i in range(cfg.a))  # a generator: no pickle takes it

    cannot = r"^its result \(a generator\) cannot be pickled: .*generator"
    with pytest.raises(RuntimeError, match=cannot) as failed, sweep_of(hydra_sweep_runner, "isolated", task, tmp_path):
        pass
    assert is_job_died(failed.value)


@pytest.mark.usefixtures("hydra_restore_singletons")
def test_an_error_that_cannot_be_pickled_fails_its_job_saying_what_was_raised(
    hydra_sweep_runner: TSweepRunner, tmp_path: Path
) -> None:
    class Unpicklable(RuntimeError):
        def __init__(self, message: str) -> None:
            super().__init__(message)
            self.lock = threading.Lock()  # no pickle takes it

    def task(cfg: DictConfig) -> Any:
        raise Unpicklable(f"job {cfg.a} kept its lock")

    # it said "its result (a Unpicklable) cannot be pickled", as if the job had returned it
    raised = r"^raised Unpicklable: job 0 kept its lock \(not picklable, sent as text: .*lock"
    with pytest.raises(RuntimeError, match=raised) as failed, sweep_of(hydra_sweep_runner, "isolated", task, tmp_path):
        pass
    assert is_job_died(failed.value)


def die(how: str, folder: Path) -> Any:
    """A task function whose job a=0 ends its process `how` (or leaves `woke` after 2 minutes); job a=1 leaves `ran`."""

    def task(cfg: DictConfig) -> Any:
        if cfg.a == 1:
            (folder / "ran").touch()
            return 1
        if how == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if how == "exit":
            os._exit(3)
        time.sleep(120)
        (folder / "woke").touch()

    return task


@pytest.mark.usefixtures("hydra_restore_singletons")
@pytest.mark.parametrize(
    ("how", "reason"),
    [
        ("segfault", "died from signal SIGSEGV"),
        ("exit", "exited with code 3 without a result"),
        ("hang", "killed after the per-job timeout of 10 s"),
    ],
)
def test_a_job_that_dies_hard_fails_alone_and_says_why(
    hydra_sweep_runner: TSweepRunner, tmp_path: Path, capsys: pytest.CaptureFixture[str], how: str, reason: str
) -> None:
    task = die(how, tmp_path)
    with (
        pytest.raises(RuntimeError, match=f"^job 0 {reason}$") as failed,
        sweep_of(hydra_sweep_runner, "isolated", task, tmp_path, "hydra.launcher.timeout_s=10"),
    ):
        pass
    assert is_job_died(failed.value)
    assert "Error executing job with overrides: ['+a=0']" in capsys.readouterr().err  # Hydra's line names the job
    assert (tmp_path / "ran").exists()  # the job after the dead one ran: the sweep went on
    assert not (tmp_path / "woke").exists()  # the hanging job was killed, not waited for
