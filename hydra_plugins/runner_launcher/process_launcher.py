"""A Hydra launcher that runs every job in a fresh process, one or several at a time.

`hydra/launcher=isolated` runs jobs one after another, each in its own process; a job that
segfaults, aborts, is killed or runs past `timeout_s` fails alone. `hydra/launcher=parallel`
runs several at once, each in the share of the machine its backend plans (`Backend.plan_slots`:
its own NeuronCores, its own GPU, or its share of CPU threads), given to it through
environment variables; no job's config is rewritten. Processes are started with `spawn`: the
Neuron runtime refuses children forked after it started. The child gets its Hydra state as
the submitit plugin hands it over (the Singleton state and the HydraContext). Hydra requires
launchers to live in the `hydra_plugins` package.
"""

import importlib
import json
import logging
import multiprocessing
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

if TYPE_CHECKING:
    from runner.backends.base import Slot

log = logging.getLogger(__name__)
RESULT_FILE = ".launcher_result.json"
POLL_S = 0.2
# seconds a stopped job gets to close its run before it is killed
STOP_GRACE_S = 30


class JobFailed(RuntimeError):
    """A job raised outside the task function's own handling (Hydra reported it as failed)."""


def importable_name(function: TaskFunction) -> tuple[str, str]:
    """Module and name to import the task function by in a spawned process.

    `python -m runner` runs runner/__main__.py as `__main__`, which spawn does not re-import
    in the child, so the function is looked up under its real module name there.
    """
    module = function.__module__
    spec = getattr(sys.modules.get(module), "__spec__", None)
    if module == "__main__" and spec is not None:
        module = spec.name
    return module, function.__qualname__


def _child(task: tuple[str, str], hydra_state: bytes, env: dict[str, str], result: str) -> None:
    """Entry point of a job's process: run the job as Hydra would and leave its result."""
    import cloudpickle

    os.environ.update(env)
    task_function = getattr(importlib.import_module(task[0]), task[1])
    hydra_context, singleton_state, config = cloudpickle.loads(hydra_state)
    Singleton.set_state(singleton_state)
    setup_globals()
    try:
        ret = run_job(task_function, config, "hydra.sweep.dir", "hydra.sweep.subdir", hydra_context=hydra_context)
    except KeyboardInterrupt as stop:  # SIGINT/SIGTERM: the job closed its run KILLED; exit quietly
        from runner.signals import exit_code_of

        sys.exit(exit_code_of(stop))
    try:
        value, completed = ret.return_value, True
    except Exception as err:  # return_value re-raises what the job raised
        value, completed = repr(err), False
    Path(result).write_text(json.dumps({"completed": completed, "value": value}))


class ProcessLauncher(Launcher):
    """Runs each job in a spawned process; `jobs` at a time, each in its own slot."""

    def __init__(self, jobs: int = 1, timeout_s: int = 0, cores: str | None = None, cores_per_job: int = 1) -> None:
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.cores = None if cores is None else str(cores)
        self.cores_per_job = cores_per_job
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Keep what launch() needs."""
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _slots(self) -> list["Slot"]:
        """Ask the backend the sweep runs on (auto resolved as a job would) how to share the machine."""
        assert self.config is not None
        from runner.backends.registry import launcher_slots
        from runner.callbacks import UsageError
        from runner.config import ConfigError

        try:
            return launcher_slots(self.config.backend, self.jobs, self.cores, self.cores_per_job)
        except ConfigError as err:
            raise UsageError(str(err)) from None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs, at most one per slot at a time, and return one JobReturn each."""
        assert self.config is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        free = self._slots()
        log.info("Launching %d jobs, %d at a time, each in a fresh process", len(job_overrides), len(free))
        pending = list(enumerate(job_overrides, start=initial_job_idx))
        running: dict[int, tuple[Any, Slot, DictConfig, float]] = {}
        results: dict[int, JobReturn] = {}
        try:
            self._run_all(pending, running, free, results)
        except KeyboardInterrupt:
            self._stop(running, results)
            raise
        return [results[idx] for idx in sorted(results)]

    def _run_all(
        self,
        pending: list[tuple[int, Sequence[str]]],
        running: dict[int, tuple[Any, "Slot", DictConfig, float]],
        free: list["Slot"],
        results: dict[int, JobReturn],
    ) -> None:
        """Start jobs as slots free up until every job has a result."""
        assert self.hydra_context is not None and self.task_function is not None
        import cloudpickle

        from runner.signals import raise_if_stopped

        spawn = multiprocessing.get_context("spawn")
        while pending or running:
            while pending and free:
                idx, overrides = pending.pop(0)
                slot = free.pop(0)
                config = self._job_config(idx, list(overrides))
                log.info("\t#%d : %s  [%s]", idx, " ".join(filter_overrides(overrides)), slot.name)
                result = self._job_dir(config) / RESULT_FILE
                result.unlink(missing_ok=True)
                # cloudpickle, as the submitit plugin hands its jobs their Hydra state (Hydra's
                # resolvers are closures, which the standard pickle refuses)
                state = cloudpickle.dumps((self.hydra_context, Singleton.get_state(), config))
                args = (importable_name(self.task_function), state, dict(slot.env), str(result))
                process = spawn.Process(target=_child, args=args)
                process.start()
                running[idx] = (process, slot, config, time.monotonic())
            time.sleep(POLL_S)
            raise_if_stopped()
            for idx, (process, slot, config, started) in list(running.items()):
                timed_out = self.timeout_s and time.monotonic() - started > self.timeout_s
                if timed_out:
                    process.kill()
                if process.is_alive():
                    continue
                process.join()
                results[idx] = self._collect(config, process.exitcode, bool(timed_out))
                free.append(slot)
                del running[idx]

    def _stop(self, running: dict[int, tuple[Any, "Slot", DictConfig, float]], results: dict[int, JobReturn]) -> None:
        """The sweep was stopped: ask running jobs to stop (SIGTERM), wait for them to close their runs."""
        for process, *_ in running.values():
            process.terminate()
        for idx, (process, _, config, _) in running.items():
            process.join(STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
            results[idx] = self._collect(config, process.exitcode, False, stopped=True)

    def _job_config(self, idx: int, overrides: list[str]) -> DictConfig:
        assert self.config is not None and self.hydra_context is not None
        config = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(config):
            config.hydra.job.id = f"{config.hydra.job.name}_{idx}"
            config.hydra.job.num = idx
        return config

    @staticmethod
    def _job_dir(config: DictConfig) -> Path:
        HydraConfig.instance().set_config(config)
        return Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)

    def _collect(self, config: DictConfig, exitcode: int | None, timed_out: bool, stopped: bool = False) -> JobReturn:
        """Turn a finished process into a JobReturn; mark the run of a dead job FAILED (KILLED if `stopped`) now."""
        from runner.job import NO_RESULT, close_dead_job

        job_dir = self._job_dir(config)
        ret = JobReturn(overrides=list(config.hydra.overrides.task), cfg=config, working_dir=str(job_dir))
        result = job_dir / RESULT_FILE
        if result.is_file() and not timed_out:
            outcome = json.loads(result.read_text())
            ret.status = JobStatus.COMPLETED if outcome["completed"] else JobStatus.FAILED
            ret.return_value = outcome["value"] if outcome["completed"] else JobFailed(outcome["value"])
            return ret
        if stopped:
            reason = "stopped with the sweep"
        elif timed_out:
            reason = f"killed after the per-job timeout of {self.timeout_s} s"
        elif exitcode is not None and exitcode < 0:
            reason = f"died from signal {signal.Signals(-exitcode).name}"
        else:
            reason = f"exited with code {exitcode} without a result"
        log.error("job %s %s", job_dir.name, reason)
        uri = OmegaConf.select(config, "tracking.uri") if OmegaConf.select(config, "tracking.enabled") else None
        close_dead_job(job_dir, reason, uri, stopped, " ".join(config.hydra.overrides.task))
        # Like a job that raised: recorded as failed, and the sweep goes on to its summary,
        # which exits non-zero. (A FAILED JobReturn would stop Hydra before that summary.)
        ret.status = JobStatus.COMPLETED
        ret.return_value = NO_RESULT
        return ret
