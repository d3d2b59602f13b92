"""The runner's Hydra launchers: jobs in this process, or each in a fresh process, one or several at a time.

`hydra/launcher=inprocess` (the runner's default) runs jobs one after another in the sweep's
own process, as Hydra's basic launcher does. `hydra/launcher=isolated` runs them one after
another, each in its own process; a job that segfaults, aborts, is killed or runs past
`timeout_s` fails alone. `hydra/launcher=parallel` runs several at once. Processes are started
with `spawn`: the Neuron runtime refuses children forked after it started. The child gets the
task function and its Hydra state as the submitit plugin hands them over (cloudpickle: Hydra's
resolvers, closures and callable objects travel), runs the job with Hydra's `run_job`, and sends
back the JobReturn whole, pickled. Any Hydra app can use the three (their configs are registered
in Hydra's ConfigStore when Hydra loads this plugin). In the runner's own sweep, a launcher hands
the jobs it was given to the interleaved rounds before the first one runs
(`runner.sweep.rounds.before_launch`), and each parallel job runs in the share of the machine its
backend plans (`Backend.plan_slots`: its own NeuronCores, its own GPU, or its share of CPU
threads), given to it through environment variables; no job's config is rewritten. Hydra
requires launchers to live in the `hydra_plugins` package.
"""

import importlib
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)
POLL_S = 0.2
# seconds a stopped job gets to close its run before it is killed
STOP_GRACE_S = 30
# a share of the machine: its name, and the environment variables its job starts with
Slot = tuple[str, dict[str, str]]


@dataclass
class InProcessLauncherConf:
    """`hydra/launcher=inprocess`: every job in the sweep's own process, one at a time (the runner's default).

    Jobs share the process's imports and caches; one that crashes the process ends the sweep.
    """

    _target_: str = "hydra_plugins.runner_launcher.process_launcher.InProcessLauncher"
    # in the runner's sweep, seconds each worker process of a job (its first call, each round of its steady state)
    # may run before it is stopped and the job fails as hung; 0 = no limit. The job itself runs in this process:
    # hydra/launcher=isolated bounds it whole
    timeout_s: int = 3600


@dataclass
class IsolatedLauncherConf:
    """`hydra/launcher=isolated`: one fresh process per job, one job at a time.

    A crash, abort, kill or timeout fails only that job. In the runner, each job sees the
    machine as a single run would (backend.cores as given):
    python -m runner -m +experiment=rmsnorm_comparison hydra/launcher=isolated
    """

    _target_: str = "hydra_plugins.runner_launcher.process_launcher.ProcessLauncher"
    # jobs at a time
    jobs: int = 1
    # seconds before a job is killed (in the runner's sweep, each of its worker processes too); 0 = no limit
    timeout_s: int = 3600


@dataclass
class ParallelLauncherConf(IsolatedLauncherConf):
    """`hydra/launcher=parallel`: several jobs at once, each in a fresh process.

    In the runner's sweep each job gets its own share of the machine, planned by the backend the
    sweep runs on (backend=auto resolves as a job would) and given to the job through its
    environment: on Trainium cores_per_job contiguous NeuronCores each (NEURON_RT_VISIBLE_CORES),
    out of cores; on CUDA one GPU each (CUDA_VISIBLE_DEVICES); on the CPU cpu_count / jobs threads each:
    python -m runner -m +experiment=rmsnorm_comparison hydra/launcher=parallel hydra.launcher.jobs=3
    python -m runner -m ... hydra/launcher=parallel hydra.launcher.cores=0-31   # trn1.32xlarge: 32 jobs at once
    """

    # jobs at a time; 0 = one per NeuronCore group or GPU, or one per CPU core
    jobs: int = 0
    # NeuronCores the jobs share, e.g. 0-31 or 0-7,16-23; null: every visible core
    cores: str | None = None
    # contiguous NeuronCores each job owns
    cores_per_job: int = 1


ConfigStore.instance().store(group="hydra/launcher", name="inprocess", node=InProcessLauncherConf, provider="runner")
ConfigStore.instance().store(group="hydra/launcher", name="isolated", node=IsolatedLauncherConf, provider="runner")
ConfigStore.instance().store(group="hydra/launcher", name="parallel", node=ParallelLauncherConf, provider="runner")


class JobDied(RuntimeError):
    """A job whose process ended without a result: a signal, an exit, the per-job timeout, or its sweep's stop."""


def portable(function: TaskFunction) -> TaskFunction | tuple[str, str]:
    """The task function as a spawned child gets it: itself, or where to import it from.

    A function of the `__main__` of `python -m package` (the runner's) is imported by its module
    name: spawn does not run such a module again in the child, and cloudpickle would copy the
    function without what its module sets up when imported (the runner's output redaction).
    """
    main = sys.modules["__main__"]
    spec = getattr(main, "__spec__", None)
    name = getattr(function, "__name__", "")
    if spec is not None and getattr(main, name, None) is function:
        return spec.name, name
    return function


def _child(payload: bytes, env: dict[str, str], result: str) -> None:
    """Entry point of a job's process: run the job as Hydra would and leave its JobReturn, pickled."""
    import cloudpickle

    from runner.signals import exit_code_of

    os.environ.update(env)
    task, hydra_context, singleton_state, config = cloudpickle.loads(payload)
    Singleton.set_state(singleton_state)
    setup_globals()
    task_function = getattr(importlib.import_module(task[0]), task[1]) if isinstance(task, tuple) else task
    try:
        ret = run_job(task_function, config, "hydra.sweep.dir", "hydra.sweep.subdir", hydra_context=hydra_context)
    except KeyboardInterrupt as stop:  # SIGINT/SIGTERM: the job closed its run KILLED; exit quietly
        sys.exit(exit_code_of(stop))
    try:
        pickled = cloudpickle.dumps(ret)
    except Exception as err:  # what the job returned or raised cannot leave its process
        value, what = ret._return_value, type(ret._return_value).__name__
        if ret.status == JobStatus.FAILED:  # the job raised it: say what, as text
            why = f"raised {what}: {value} (not picklable, sent as text: {err})"
        else:
            why = f"its result (a {what}) cannot be pickled: {err}"
        ret.status, ret.return_value = JobStatus.FAILED, JobDied(why)
        pickled = cloudpickle.dumps(ret)
    Path(result).write_bytes(pickled)


class RunnerLauncher(Launcher):
    """What the runner's launchers share: Hydra's set-up of a batch of jobs, and in the runner's sweep its rounds."""

    def __init__(self, jobs: int = 1, timeout_s: int = 0) -> None:
        from runner.config import check_launcher_limits

        check_launcher_limits(jobs, timeout_s)  # the runner's sweep refuses them sooner, in one line
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None
        # whether the runner's sweep callback runs this sweep (set before Hydra sets the launcher up): its jobs'
        # steady state is then timed in rounds first, and the parallel launcher plans its slots by the runner's backend
        self.runner_sweep = False

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Keep what launch() needs."""
        from runner.job import SWEEP_ID_ENV

        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function
        self.runner_sweep = SWEEP_ID_ENV in os.environ

    def _job_configs(
        self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int, slots: list[Any] | None = None
    ) -> list[DictConfig]:
        """Each job's config, composed as Hydra's basic launcher does; in the runner's sweep the rounds time them first.

        `slots` (`runner.backends.base.Slot`): where the parallel launcher runs them, and the rounds their workers.
        """
        assert self.config is not None and self.hydra_context is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        configs = []
        for idx, overrides in enumerate(job_overrides, start=initial_job_idx):
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config):
                config.hydra.job.id = f"{config.hydra.job.name}_{idx}"
                config.hydra.job.num = idx
            configs.append(config)
        if self.runner_sweep:
            from runner.errors import ConfigError, UsageError
            from runner.sweep.rounds import before_launch

            try:
                before_launch(self.config, configs, slots, self.timeout_s or None)
            except ConfigError as err:  # a job's bad config: the sweep is refused before any job runs
                raise UsageError(str(err)) from None
        return configs


class InProcessLauncher(RunnerLauncher):
    """Runs the jobs one after another in this process, as Hydra's basic launcher does."""

    def __init__(self, timeout_s: int = 0) -> None:
        super().__init__(timeout_s=timeout_s)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run each job with Hydra's `run_job`; the sweep's logging is set again after each (a job may change it)."""
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        log.info("Launching %d jobs locally", len(job_overrides))
        returns = []
        for config, overrides in zip(self._job_configs(job_overrides, initial_job_idx), job_overrides, strict=True):
            log.info("\t#%d : %s", config.hydra.job.num, " ".join(filter_overrides(overrides)))
            sweep_keys = ("hydra.sweep.dir", "hydra.sweep.subdir")
            returns.append(run_job(self.task_function, config, *sweep_keys, hydra_context=self.hydra_context))
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return returns


class ProcessLauncher(RunnerLauncher):
    """Runs each job in a spawned process; `jobs` at a time, each in its own slot."""

    def __init__(self, jobs: int = 1, timeout_s: int = 0, cores: str | None = None, cores_per_job: int = 1) -> None:
        super().__init__(jobs, timeout_s)
        self.cores = cores
        self.cores_per_job = cores_per_job

    def _runner_slots(self) -> list[Any]:
        """In the runner's sweep, the shares of the machine its backend plans for `jobs` at a time (`Slot`s)."""
        assert self.config is not None
        from runner.backends.registry import launcher_slots
        from runner.errors import ConfigError, UsageError

        try:
            return launcher_slots(self.config.backend, self.jobs, self.cores, self.cores_per_job)
        except ConfigError as err:
            raise UsageError(str(err)) from None

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs, at most one per slot at a time, and return one JobReturn each.

        Outside the runner's sweep the slots are `jobs` processes (0: one per CPU), the machine not shared out.
        """
        planned = self._runner_slots() if self.runner_sweep else None
        if planned is None:
            free: list[Slot] = [("a process of its own", {})] * (self.jobs or os.cpu_count() or 1)
        else:
            free = [(slot.name, dict(slot.env)) for slot in planned]
        if not free:
            raise ValueError(f"hydra.launcher: no share of the machine to run a job in (jobs={self.jobs})")
        round_slots = planned if self.jobs != 1 else None
        pending = list(enumerate(self._job_configs(job_overrides, initial_job_idx, round_slots), initial_job_idx))
        log.info("Launching %d jobs, %d at a time, each in a fresh process", len(job_overrides), len(free))
        running: dict[int, tuple[Any, Slot, DictConfig, float]] = {}
        results: dict[int, JobReturn] = {}
        with tempfile.TemporaryDirectory(prefix="hydra_launcher_") as folder:
            try:
                self._run_all(pending, running, free, results, Path(folder))
            except KeyboardInterrupt:
                self._stop(running, results, Path(folder))
                raise
        return [results[idx] for idx in sorted(results)]

    def _run_all(
        self,
        pending: list[tuple[int, DictConfig]],
        running: dict[int, tuple[Any, Slot, DictConfig, float]],
        free: list[Slot],
        results: dict[int, JobReturn],
        folder: Path,
    ) -> None:
        """Start jobs as slots free up until every job has a result (a JobReturn pickled in `folder`)."""
        assert self.hydra_context is not None and self.task_function is not None
        import cloudpickle

        from runner.signals import raise_if_stopped

        spawn = multiprocessing.get_context("spawn")
        task = portable(self.task_function)
        while pending or running:
            while pending and free:
                idx, config = pending.pop(0)
                slot = free.pop(0)
                log.info("\t#%d : %s  [%s]", idx, " ".join(filter_overrides(config.hydra.overrides.task)), slot[0])
                state = cloudpickle.dumps((task, self.hydra_context, Singleton.get_state(), config))
                process = spawn.Process(target=_child, args=(state, slot[1], str(folder / str(idx))))
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
                results[idx] = self._collect(folder / str(idx), config, process.exitcode, bool(timed_out))
                free.append(slot)
                del running[idx]

    def _stop(
        self, running: dict[int, tuple[Any, Slot, DictConfig, float]], results: dict[int, JobReturn], folder: Path
    ) -> None:
        """The sweep was stopped: ask running jobs to stop (SIGTERM), wait for them to close their runs."""
        for process, *_ in running.values():
            process.terminate()
        for idx, (process, _, config, _) in running.items():
            process.join(STOP_GRACE_S)
            if process.is_alive():
                process.kill()
                process.join()
            results[idx] = self._collect(folder / str(idx), config, process.exitcode, False, stopped=True)

    def _collect(
        self, result: Path, config: DictConfig, exitcode: int | None, timed_out: bool, stopped: bool = False
    ) -> JobReturn:
        """The job's own JobReturn, or for a job that left none one that says why (see `_died`)."""
        import cloudpickle

        if result.is_file() and not timed_out:
            ret: JobReturn = cloudpickle.loads(result.read_bytes())
            return ret
        if stopped:
            reason = "stopped with the sweep"
        elif timed_out:
            reason = f"killed after the per-job timeout of {self.timeout_s} s"
        elif exitcode is not None and exitcode < 0:
            reason = f"died from signal {signal.Signals(-exitcode).name}"
        else:
            reason = f"exited with code {exitcode} without a result"
        return self._died(config, reason, stopped)

    def _died(self, config: DictConfig, reason: str, stopped: bool) -> JobReturn:
        """The JobReturn of a job whose process died: FAILED, with `reason` as its error.

        In the runner's sweep the job's run is marked FAILED (KILLED if `stopped`) now, and the
        JobReturn is a NaN result, as for a job that raised: the sweep goes on to its summary,
        which exits non-zero (a FAILED JobReturn would stop Hydra before that summary).
        """
        HydraConfig.instance().set_config(config)
        job_dir = Path(str(config.hydra.sweep.dir)) / str(config.hydra.sweep.subdir)
        log.error("job %s %s", job_dir.name, reason)
        overrides = list(config.hydra.overrides.task)
        if not self.runner_sweep:
            return JobReturn(overrides, status=JobStatus.FAILED, _return_value=JobDied(f"job {job_dir.name} {reason}"))
        from runner import names
        from runner.job import NO_RESULT, close_dead_job
        from runner.secrets import redact

        uri = OmegaConf.select(config, "tracking.uri") if OmegaConf.select(config, "tracking.enabled") else None
        workload = OmegaConf.select(config, "hydra.runtime.choices.workload") or "custom"  # as the job names its run
        run_name = names.job_name(workload, [redact(o) for o in overrides], names.swept_keys())
        close_dead_job(job_dir, reason, uri, stopped, " ".join(overrides), run_name)
        return JobReturn(overrides, status=JobStatus.COMPLETED, _return_value=NO_RESULT)
