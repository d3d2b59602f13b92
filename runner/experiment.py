"""One job, start to finish: backend, workload, measurement, MLflow. No Hydra in here."""

from __future__ import annotations

import json
import logging
import platform
from typing import Any

from omegaconf import OmegaConf

from runner import CONF_DIR
from runner.backends import CpuBackend, make_backend
from runner.build import build_workload
from runner.config import JobInfo, RunSpec
from runner.console import job_summary
from runner.manifest import build_manifest
from runner.measure import measure
from runner.optable import self_time_by_op, summary_metrics
from runner.tracking import flatten, git_commit, open_run

log = logging.getLogger(__name__)


def run_tags(spec: RunSpec, job: JobInfo, backend: CpuBackend, manifest: dict[str, Any]) -> dict[str, Any]:
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
        **{f"runner.version.{name}": version for name, version in manifest["packages"].items()},
        **{f"runner.version.{name}": version for name, version in manifest["system_packages"].items()},
        "runner.version.python": manifest["python"],
        **{f"env.{name}": value for name, value in manifest["environment"].items()},
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
    capture_dir = backend.capture_dir(job.output_dir)
    manifest = build_manifest(backend.manifest())
    log.info("%s on %s (%s)", job.run_name, backend.name, backend.device_name())
    with open_run(spec.tracking, job.run_name) as run:
        run.log_params(flatten(resolved_config))
        run.set_tags(run_tags(spec, job, backend, manifest))
        run.log_text(json.dumps(manifest, indent=2), "environment.json")
        run.log_text(OmegaConf.to_yaml(resolved_config), "config_resolved.yaml")
        if job.hydra_dir is not None:
            run.log_artifacts(job.hydra_dir, "hydra")
        result = measure(workload, backend, spec, capture_dir)
        report = backend.inspect_capture(capture_dir, spec.profiler, result.profiler_output)
        metrics = {"time/first_call_s": result.first_call_s, **summary_metrics(result.table), **report.metrics}
        run.log_metrics(metrics)
        by_op = self_time_by_op(result.table)
        device_time = "reported" if result.table.has_device_time else "absent: the profiler reported no device time"
        run.set_tags({"runner.top_op": next(iter(by_op), None), "runner.device_time": device_time, **report.tags})
        run.log_table(result.table.columns(), "key_averages.json")
        run.log_text(result.printed_table, "key_averages.txt")
        for name, text in report.texts.items():
            run.log_text(text, name)
        run.log_capture(capture_dir, capture_dir.name, spec.tracking.max_artifact_mb)
        print(job_summary(job.run_name, result.table, metrics, capture_dir, run.describe()), flush=True)
    return metrics
