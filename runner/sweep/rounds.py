"""Before a sweep's first job: its jobs composed as the launcher will compose them, their steady state timed in rounds.

The rounds themselves are `runner.execute.rounds`; this is the Hydra side: which jobs the
sweeper will run, each one's spec and config hash (the key its rounds are left under), and
the slots the parallel launcher will give its jobs.
"""

from __future__ import annotations

import copy
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf, open_dict

from runner import names
from runner.backends.base import Slot
from runner.backends.registry import backend_class, launcher_slots
from runner.config import ConfigError, load_run_spec
from runner.execute.rounds import RoundJob, rounds_of, save_rounds, time_rounds
from runner.execute.workers import prepare_workers
from runner.job import config_hash, finished_run_id
from runner.secrets import redact
from runner.sweep.jobs import BASIC_SWEEPER, sweep_jobs

log = logging.getLogger(__name__)
PROCESS_LAUNCHER = "hydra_plugins.runner_launcher.process_launcher.ProcessLauncher"
# the sweep folder's subfolder where each job finds its rounds, by config hash
ROUNDS_FOLDER = "rounds"


def job_configs(config: DictConfig) -> list[DictConfig]:
    """Each job's composed config, hydra node included, in the order the basic sweeper launches them."""
    loader = GlobalHydra.instance().config_loader()
    configs = []
    for number, job in enumerate(sweep_jobs(config) or []):
        job_config = loader.load_sweep_config(config, job)
        with open_dict(job_config):
            job_config.hydra.job.id = job_config.hydra.job.num = number
        configs.append(job_config)
    return configs


@dataclass(frozen=True)
class SweepJob:
    """A job of the sweep the rounds may time, and whether a FINISHED run of its configuration skips it."""

    job: RoundJob
    resume: bool

    def skipped(self) -> bool:
        """True when the job will be skipped: it resumes and its configuration has a FINISHED run."""
        tracking = self.job.spec.tracking
        return self.resume and tracking.enabled and finished_run_id(tracking, self.job.key) is not None


def round_job(job_config: DictConfig, swept: set[str]) -> SweepJob | None:
    """The job as the rounds time it; None when it times its own steady state (or its own error says why)."""
    task = copy.deepcopy(job_config)
    with open_dict(task):
        del task["hydra"]
    workload = job_config.hydra.runtime.choices.get("workload") or "custom"
    name = names.job_name(workload, [redact(o) for o in job_config.hydra.overrides.task], swept)
    try:
        spec = load_run_spec(task)
        # the class, not a backend: making one pins this process (NEURON_RT_VISIBLE_CORES), which every job inherits
        count, why = rounds_of(spec, backend_class(spec.backend.name))
    except ConfigError:  # refused: the job says so itself when it runs
        return None
    if not count:
        log.info("rounds: %s times its own steady state: %s", name, why)
        return None
    key = config_hash(OmegaConf.to_container(task, resolve=True))  # type: ignore[arg-type]
    return SweepJob(RoundJob(name, key, spec, count), bool(task.get("resume", True)))


def parallel_slots(config: DictConfig) -> list[Slot] | None:
    """The slots the parallel launcher will run the jobs in; None when they run one at a time."""
    launcher = config.hydra.launcher
    if launcher.get("_target_") != PROCESS_LAUNCHER or launcher.get("jobs", 1) == 1:
        return None
    return launcher_slots(config.backend, launcher.jobs, launcher.get("cores"), launcher.get("cores_per_job", 1))


def round_jobs(config: DictConfig) -> list[SweepJob]:
    """The sweep's jobs the rounds may time; their fork server starts now, its imports beside the store's opening.

    None when the sweep is not the basic sweeper's grid or its jobs run on other hosts (the
    Slurm launcher): each job then times its own steady state.
    """
    launcher = str(config.hydra.launcher.get("_target_", ""))
    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER or "slurm" in launcher.lower():
        log.info("rounds: none under this sweeper and launcher: each job times its own steady state")
        return []
    swept = names.swept_keys()
    saved = HydraConfig.instance().cfg
    try:
        jobs = []
        for job_config in job_configs(config):
            HydraConfig.instance().set_config(job_config)  # for the job's own ${hydra:...} values
            if (job := round_job(job_config, swept)) is not None:
                jobs.append(job)
    finally:
        HydraConfig.instance().cfg = saved
    if len(jobs) > 1:
        prepare_workers([sweep_job.job.spec for sweep_job in jobs])
    return jobs


def time_sweep_rounds(config: DictConfig, candidates: list[SweepJob], sweep_id: str) -> None:
    """Time the steady state of the sweep's jobs in interleaved rounds and tell the jobs where to find it.

    Left to the jobs when fewer than two take part (the rest skipped as FINISHED): a job then times its own.
    """
    jobs = [candidate.job for candidate in candidates if not candidate.skipped()]
    if len(jobs) < 2:
        return
    try:
        slots = parallel_slots(config)
    except ConfigError:  # the launcher says so itself
        return
    folder = Path(config.hydra.sweep.dir) / ROUNDS_FOLDER
    save_rounds(folder, time_rounds(jobs, sweep_id, slots))
    os.environ[names.ROUNDS_DIR_ENV] = str(folder.resolve())
