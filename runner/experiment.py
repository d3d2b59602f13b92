"""One job, start to finish: backend, workload, measurement, MLflow. No Hydra in here."""

from __future__ import annotations

import logging
import platform
from importlib import metadata
from typing import Any

from omegaconf import OmegaConf

from runner import CONF_DIR
from runner.backends import CpuBackend, make_backend
from runner.build import build_workload
from runner.config import JobInfo, RunSpec
from runner.console import job_summary
from runner.measure import measure
from runner.optable import self_time_by_op, summary_metrics
from runner.tracking import flatten, git_commit, open_run

log = logging.getLogger(__name__)
TRACE_DIR = "trace"


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def run_tags(spec: RunSpec, job: JobInfo, backend: CpuBackend) -> dict[str, Any]:
    """Tags that say what ran where, with which software."""
    return {
        "runner.workload": job.workload_name,
        "runner.workload_target": spec.workload.target,
        "runner.backend": backend.name,
        "runner.backend_requested": spec.backend.name,
        "runner.device": backend.device_name(),
        "runner.host": platform.node(),
        "runner.overrides": " ".join(job.overrides),
        "runner.output_dir": str(job.output_dir),
        "runner.git_commit": git_commit(CONF_DIR.parent),
        "runner.version.torch": _version("torch"),
        "runner.version.hydra": _version("hydra-core"),
        "runner.version.mlflow": _version("mlflow") or _version("mlflow-skinny"),
        "runner.version.python": platform.python_version(),
    }


def run_experiment(spec: RunSpec, job: JobInfo, resolved_config: dict[str, Any]) -> dict[str, float]:
    """Run one profiled job and log it; return its summary metrics.

    Everything that can be rejected (device, workload arguments) is checked before the
    MLflow run starts, so bad input leaves no run behind.

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    backend = make_backend(spec.backend)
    workload = build_workload(spec.workload, backend)
    trace_dir = job.output_dir / TRACE_DIR
    log.info("%s on %s (%s)", job.run_name, backend.name, backend.device_name())
    with open_run(spec.tracking, job.run_name) as run:
        run.log_params(flatten(resolved_config))
        run.set_tags(run_tags(spec, job, backend))
        result = measure(workload, backend, spec, trace_dir)
        metrics = {"time/first_call_s": result.first_call_s, **summary_metrics(result.table)}
        run.log_metrics(metrics)
        by_op = self_time_by_op(result.table)
        run.set_tags({"runner.top_op": next(iter(by_op), None), "runner.device_time": result.table.has_device_time})
        run.log_table(result.table.columns(), "key_averages.json")
        run.log_text(result.printed_table, "key_averages.txt")
        run.log_artifacts(trace_dir, TRACE_DIR)
        run.log_text(OmegaConf.to_yaml(resolved_config), "config_resolved.yaml")
        if job.hydra_dir is not None:
            run.log_artifacts(job.hydra_dir, "hydra")
        print(job_summary(job.run_name, result.table, metrics, trace_dir, run.describe()), flush=True)
    return metrics
