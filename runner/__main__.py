"""`python -m runner`: compose the config, validate it, run one profiled job."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from runner import CONF_DIR
from runner.callbacks import UsageError
from runner.config import ConfigError, JobInfo, load_run_spec, register_schemas
from runner.sweep import SWEEP_ID_ENV, one_line, write_status

register_schemas()
# Overrides left out of run names: group selections (the workload is the name's first word)
# and where results go.
UNNAMED = ("workload=", "experiment=", "tracking=", "tracking.", "hydra.")
log = logging.getLogger("runner")


def job_info(cfg: DictConfig) -> JobInfo:
    """Describe this job from Hydra's runtime config."""
    hydra_cfg = HydraConfig.get()
    workload = hydra_cfg.runtime.choices.get("workload") or "custom"
    overrides = list(hydra_cfg.overrides.task)
    shown = [o for o in overrides if not o.lstrip("+").startswith(UNNAMED)]
    output_dir = Path(hydra_cfg.runtime.output_dir)
    hydra_dir = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else None
    return JobInfo(" ".join([workload, *shown]), workload, overrides, output_dir, hydra_dir)


def run(cfg: DictConfig) -> float:
    """Run one job; return its steady-state median step time, the metric a sweeper minimises.

    In a sweep a failing job is recorded (run FAILED, `job_status.json`) and the sweep goes
    on; the sweep's summary reports it and the sweep exits non-zero at the end.
    """
    job = job_info(cfg)
    sweeping = HydraConfig.get().mode == RunMode.MULTIRUN
    write_status(
        job.output_dir,
        status="RUNNING",
        overrides=" ".join(job.overrides),
        pid=os.getpid(),
        sweep_id=os.environ.get(SWEEP_ID_ENV),
        run_id=None,
        error=None,
    )
    try:
        spec = load_run_spec(cfg)
        from runner.experiment import run_experiment  # torch and mlflow load only past --help

        resolved = OmegaConf.to_container(cfg, resolve=True)
        metrics = run_experiment(spec, job, resolved, resume=sweeping and bool(cfg.get("resume", True)))  # type: ignore[arg-type]
    except Exception as err:
        write_status(job.output_dir, status="FAILED", error=one_line(err))
        if not sweeping and isinstance(err, ConfigError):
            raise UsageError(str(err)) from None
        if not sweeping:
            raise
        log.error("job failed, the sweep goes on: %s", one_line(err), exc_info=not isinstance(err, ConfigError))
        return float("nan")
    return metrics.get("time/step_median_ms", float("nan"))


main = hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")(run)


if __name__ == "__main__":
    main()
