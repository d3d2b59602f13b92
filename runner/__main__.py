"""`python -m runner`: the Hydra edge. Compose, describe the job, hand it to its life owner."""

from __future__ import annotations

import errno
import logging
import os
import sys
from contextlib import suppress
from pathlib import Path

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import CompactHydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runner import CONF_DIR, names
from runner.backends.user_env import record_user_environment
from runner.callbacks import NOTES, end_sweep_early
from runner.compose import help_text, hydra_help_checkable, refusal
from runner.config_loading import load_run_spec, register_schemas
from runner.errors import ConfigError, JobFailure, UsageError
from runner.job import ERROR_FILE, NO_RESULT, JobInfo, JobLife, JobStatus
from runner.secrets import one_line, redact, redact_file, redact_process_output
from runner.signals import exit_code_of, skip_final_collections
from runner.tracking.store import StoreFull

register_schemas()
redact_process_output()


def _job_info() -> JobInfo:
    """Describe this job from Hydra's runtime config, credentials masked, also in the files Hydra already wrote."""
    hydra_cfg = HydraConfig.get()
    workload = hydra_cfg.runtime.choices.get("workload") or "custom"
    overrides = [redact(o) for o in hydra_cfg.overrides.task]
    output_dir = Path(hydra_cfg.runtime.output_dir)
    hydra_dir = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else None
    for written in [*(hydra_dir.glob("*.yaml") if hydra_dir else []), output_dir.parent / "multirun.yaml"]:  # a sweep's
        redact_file(written)
    # a sweep's folder is relative to where it started (runtime.cwd), as its jobs' folders are
    swept = hydra_cfg.mode == RunMode.MULTIRUN
    rounds_dir = Path(hydra_cfg.runtime.cwd, hydra_cfg.sweep.dir, names.ROUNDS_FOLDER) if swept else None
    name = names.job_name(workload, overrides, names.swept_keys())
    return JobInfo(name, workload, overrides, output_dir, hydra_dir, rounds_dir)


def run(cfg: DictConfig) -> float:
    """Run one job; return its steady-state median step time, the metric a sweeper minimises (NaN if it failed).

    A single run checks its config before torch or Slurm support loads: only a sweep's job is a Slurm task.
    """
    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    if sweeping:
        from runner.execute.slurm_ranks import follow, slurm_task

        task = slurm_task()
        if task is not None and task.rank > 0:  # one of a Slurm job's tasks: task 0 is the job, this a rank
            with suppress(ConfigError):  # task 0 reports bad input
                follow(load_run_spec(cfg), Path(HydraConfig.get().runtime.output_dir), task)
            return NO_RESULT
    life = JobLife(_job_info(), sweeping)
    metrics: dict[str, float] = {}
    try:
        with life.running():
            spec = load_run_spec(cfg)
            from runner.experiment import run_experiment  # torch and mlflow load only past --help

            resolved = OmegaConf.to_container(cfg, resolve=True)
            resume = sweeping and bool(cfg.get("resume", True))
            metrics = run_experiment(spec, life.job, resolved, life, resume)  # type: ignore[arg-type]
    except ConfigError as err:
        raise UsageError(str(err)) from None
    except Exception as err:  # recorded by the job's life: one line here, the traceback in error.txt
        if _disk_full(err):  # every later job of a sweep would meet it too: it ends the sweep
            raise JobFailure(_disk_full_line(NOTES.folder)) from err
        where = life.job.output_dir / ERROR_FILE
        run = f"run {life.run_id} is FAILED" if life.run_id else "no run was opened"
        if life.run_id and isinstance(err, StoreFull):  # the full store may or may not have taken the run's close
            from runner.tracking.run import run_status

            status = run_status(cfg.tracking.uri, life.run_id)
            run = f"run {life.run_id} shows {status or 'a status that could not be read back'}"
            if status == JobStatus.RUNNING:
                run = (
                    f"run {life.run_id} could not be closed and shows RUNNING "
                    "until a later job of its configuration marks it FAILED"
                )
        raise JobFailure(f"the job failed: {one_line(err)} (traceback: {where}; {run})") from err
    return metrics.get(names.STEP_MEDIAN_MS, NO_RESULT)


def _disk_full(err: BaseException) -> bool:
    """Whether `err` is the disk under a folder being full (ENOSPC)."""
    return isinstance(err, OSError) and err.errno == errno.ENOSPC


def _disk_full_line(folder: str) -> str:
    """A full disk in one line: where, and what to do (Hydra's traceback said neither)."""
    return f"the disk under {folder} is full (No space left on device): free space there and run again"


def _one_line_refusal(err: Exception) -> str | None:
    """What `cli` says in one line for `err`: Hydra's refusals, a conf file's YAML, a full disk; None for a bug."""
    if isinstance(err, (CompactHydraException, yaml.YAMLError)):
        return refusal(err)
    if _disk_full(err):
        return _disk_full_line(NOTES.folder or str(Path.cwd()))
    return None


main = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(run)


def cli() -> None:
    """`main`, its refusals one line (HYDRA_FULL_ERROR=1: Hydra's report); a sweep they end says so at its end."""
    record_user_environment()  # before anything imports torch, which may load torch-neuronx
    skip_final_collections()
    # a log file that cannot be written (a full disk): logging printed a traceback per record, burying the one line
    # that names the disk; the console handler still shows every record
    logging.raiseExceptions = False
    wants_traceback = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    args = sys.argv[1:]
    try:
        if {"-h", "--help"} & set(args) and all(a in ("-h", "--help") or not a.startswith("-") for a in args):
            print(help_text(*(a for a in args if not a.startswith("-"))))
            return
        with hydra_help_checkable():
            main()
    except KeyboardInterrupt as stop:  # SIGINT/SIGTERM: runs and status files are closed already
        sys.exit(exit_code_of(stop))
    except Exception as err:
        line = None if wants_traceback else _one_line_refusal(err)
        end_sweep_early(line or one_line(err))  # a sweep ended by an error, not by a signal
        if line is None:
            raise
        sys.exit(f"error: {line}")


if __name__ == "__main__":
    cli()
