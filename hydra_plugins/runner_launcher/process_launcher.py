"""A Hydra launcher that runs every job in a fresh process, one or several at a time.

`hydra/launcher=isolated` runs jobs one after another, each in its own process; a job that
segfaults, aborts, is killed or runs past `timeout_s` fails alone. `hydra/launcher=parallel`
runs several at once and gives each a share of the machine: its own NeuronCore group
(`backend.cores_per_job` cores, as `backend.cores`), its own GPU (`CUDA_VISIBLE_DEVICES`), or
on the CPU `cpu_count / jobs` threads. Processes are started with `spawn`: the Neuron runtime
refuses forked children. Hydra requires launchers to live in the `hydra_plugins` package.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)
RESULT_FILE = ".launcher_result.json"
POLL_S = 0.2


class JobFailed(RuntimeError):
    """A job raised outside the task function's own handling (Hydra reported it as failed)."""


@dataclass
class Slot:
    """A share of the machine for one job: config overrides and environment variables."""

    name: str
    overrides: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


def plan_slots(backend: str, jobs: int, cores: list[int], cores_per_job: int, gpus: int, cpus: int) -> list[Slot]:
    """Split the machine into slots, one per concurrently running job.

    Raises:
        ValueError: there are fewer NeuronCores than one job needs.
    """
    if backend == "neuron":
        groups = [cores[i : i + cores_per_job] for i in range(0, len(cores) - cores_per_job + 1, cores_per_job)]
        if not groups:
            raise ValueError(f"backend.cores_per_job={cores_per_job} but only {len(cores)} NeuronCore(s) are visible")
        groups = groups[: jobs or len(groups)]
        return [Slot(f"NeuronCores {g[0]}-{g[-1]}", (f"backend.cores={g[0]}-{g[-1]}",)) for g in groups]
    if backend == "cuda" and gpus:
        return [Slot(f"GPU {i}", (), (("CUDA_VISIBLE_DEVICES", str(i)),)) for i in range(min(jobs or gpus, gpus))]
    count = jobs or cpus
    threads = str(max(1, cpus // count))
    env = (("OMP_NUM_THREADS", threads), ("MKL_NUM_THREADS", threads))
    return [Slot(f"CPU slot {i} ({threads} threads)", (), env) for i in range(count)]


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


def _child(task: tuple[str, str], config: DictConfig, env: dict[str, str], result: str) -> None:
    """Entry point of a job's process: run the job as Hydra would and leave its result."""
    os.environ.update(env)
    task_function = getattr(importlib.import_module(task[0]), task[1])
    setup_globals()
    HydraConfig.instance().set_config(config)
    from hydra._internal.callbacks import Callbacks

    context = HydraContext(config_loader=None, callbacks=Callbacks(config))  # type: ignore[arg-type]
    ret = run_job(task_function, config, "hydra.sweep.dir", "hydra.sweep.subdir", hydra_context=context)
    completed = ret.status == JobStatus.COMPLETED
    value = ret._return_value if completed else repr(ret._return_value)
    Path(result).write_text(json.dumps({"completed": completed, "value": value}))


class ProcessLauncher(Launcher):
    """Runs each job in a spawned process; `jobs` at a time, each in its own slot."""

    def __init__(self, jobs: int = 1, timeout_s: int = 0) -> None:
        self.jobs = jobs
        self.timeout_s = timeout_s
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        """Keep what launch() needs."""
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def _slots(self) -> list[Slot]:
        assert self.config is not None
        backend = OmegaConf.select(self.config, "backend.name", default="cpu")
        cores: list[int] = []
        gpus = 0
        if backend in ("auto", "cuda"):
            import torch

            gpus = torch.cuda.device_count()
            backend = "cuda" if gpus else "cpu"
        if backend == "neuron":
            from runner.config import parse_cores

            spec = OmegaConf.select(self.config, "backend.cores") or os.environ.get("NEURON_RT_VISIBLE_CORES")
            if not spec:
                raise ValueError("hydra/launcher=parallel with backend=neuron: set backend.cores to the cores to share")
            cores = parse_cores(spec, "backend.cores")
        per_job = int(OmegaConf.select(self.config, "backend.cores_per_job", default=1))
        return plan_slots(backend, self.jobs, cores, per_job, gpus, os.cpu_count() or 1)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        """Run the jobs, at most one per slot at a time, and return one JobReturn each."""
        assert self.config is not None and self.hydra_context is not None and self.task_function is not None
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        free = self._slots()
        log.info("Launching %d jobs, %d at a time, each in a fresh process", len(job_overrides), len(free))
        spawn = multiprocessing.get_context("spawn")
        pending = list(enumerate(job_overrides, start=initial_job_idx))
        running: dict[int, tuple[Any, Slot, DictConfig, float]] = {}
        results: dict[int, JobReturn] = {}
        while pending or running:
            while pending and free:
                idx, overrides = pending.pop(0)
                slot = free.pop(0)
                config = self._job_config(idx, [*overrides, *slot.overrides])
                log.info("\t#%d : %s  [%s]", idx, " ".join(filter_overrides(overrides)), slot.name)
                result = self._job_dir(config) / RESULT_FILE
                result.unlink(missing_ok=True)
                args = (importable_name(self.task_function), config, dict(slot.env), str(result))
                process = spawn.Process(target=_child, args=args)
                process.start()
                running[idx] = (process, slot, config, time.monotonic())
            time.sleep(POLL_S)
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
        return [results[idx] for idx in sorted(results)]

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

    def _collect(self, config: DictConfig, exitcode: int | None, timed_out: bool) -> JobReturn:
        """Turn a finished process into a JobReturn; mark the run of a dead job FAILED now."""
        from runner.sweep import mark_dead

        job_dir = self._job_dir(config)
        ret = JobReturn(overrides=list(config.hydra.overrides.task), cfg=config, working_dir=str(job_dir))
        result = job_dir / RESULT_FILE
        if result.is_file() and not timed_out:
            outcome = json.loads(result.read_text())
            ret.status = JobStatus.COMPLETED if outcome["completed"] else JobStatus.FAILED
            ret.return_value = outcome["value"] if outcome["completed"] else JobFailed(outcome["value"])
            return ret
        if timed_out:
            reason = f"killed after the per-job timeout of {self.timeout_s} s"
        elif exitcode is not None and exitcode < 0:
            reason = f"died from signal {signal.Signals(-exitcode).name}"
        else:
            reason = f"exited with code {exitcode} without a result"
        log.error("job %s %s", job_dir.name, reason)
        uri = OmegaConf.select(config, "tracking.uri") if OmegaConf.select(config, "tracking.enabled") else None
        mark_dead(job_dir, reason, uri)
        # Like a job that raised: recorded as failed, and the sweep goes on to its summary,
        # which exits non-zero. (A FAILED JobReturn would stop Hydra before that summary.)
        ret.status = JobStatus.COMPLETED
        ret.return_value = float("nan")
        return ret
