"""`python -m runner`: compose the config, validate it, run one profiled job."""

from __future__ import annotations

from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from runner import CONF_DIR
from runner.callbacks import UsageError
from runner.config import ConfigError, JobInfo, load_run_spec, register_schemas

register_schemas()
SELECTIONS = ("workload=", "experiment=")


def job_info(cfg: DictConfig) -> JobInfo:
    """Describe this job from Hydra's runtime config."""
    hydra_cfg = HydraConfig.get()
    workload = hydra_cfg.runtime.choices.get("workload") or "custom"
    overrides = list(hydra_cfg.overrides.task)
    # the workload is the name's first word; group selections add nothing readable
    shown = [o for o in overrides if not o.lstrip("+").startswith(SELECTIONS)]
    output_dir = Path(hydra_cfg.runtime.output_dir)
    hydra_dir = output_dir / hydra_cfg.output_subdir if hydra_cfg.output_subdir else None
    return JobInfo(" ".join([workload, *shown]), workload, overrides, output_dir, hydra_dir)


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float:
    """Run one job and return its profiled step time, the metric a sweeper would minimise."""
    try:
        spec = load_run_spec(cfg)
        from runner.experiment import run_experiment  # torch and mlflow load only past --help

        metrics = run_experiment(spec, job_info(cfg), OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    except ConfigError as err:
        raise UsageError(str(err)) from None
    return metrics.get("time/profiled_step_ms", float("nan"))


if __name__ == "__main__":
    main()
