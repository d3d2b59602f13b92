"""One job, start to finish: backend, workload, measurement, MLflow. No Hydra in here."""

from __future__ import annotations

import json
import logging
import os
import platform
import resource
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from omegaconf import OmegaConf

from runner import CONF_DIR
from runner.accuracy import check_accuracy
from runner.backends import CpuBackend, make_backend
from runner.build import BuiltWorkload, build_workload
from runner.config import JobInfo, RunSpec
from runner.console import job_summary
from runner.manifest import build_manifest
from runner.measure import Measurement, measure
from runner.optable import self_time_by_op
from runner.roofline import Peak, resolve_peak, roofline_metrics
from runner.sweep import config_hash, one_line, write_status
from runner.tracking import NullRun, finished_run_id, flatten, git_commit, open_run
from workloads.base import CostModel

log = logging.getLogger(__name__)
MIB = 2**20
# A training step costs about three forwards: the backward computes gradients for both the
# inputs and the weights (twice the forward's matmul FLOPs) and reads and writes as much again.
TRAIN_COST_FACTOR = 3


def run_tags(spec: RunSpec, job: JobInfo, backend: CpuBackend, manifest: dict[str, Any]) -> dict[str, Any]:
    """Tags that say what ran where, with which software."""
    return {
        "runner.workload": job.workload_name,
        "runner.workload_target": spec.workload.target,
        "runner.backend": backend.name,
        "runner.backend_requested": spec.backend.name,
        "runner.device": backend.device_name(),
        "runner.host": platform.node(),
        "runner.pid": os.getpid(),
        "runner.overrides": " ".join(job.overrides),
        "runner.output_dir": str(job.output_dir),
        "runner.git_commit": git_commit(CONF_DIR.parent),
        **{f"runner.version.{name}": version for name, version in manifest["packages"].items()},
        **{f"runner.version.{name}": version for name, version in manifest["system_packages"].items()},
        "runner.version.python": manifest["python"],
        **{f"env.{name}": value for name, value in manifest["environment"].items()},
    }


def run_experiment(
    spec: RunSpec, job: JobInfo, resolved_config: dict[str, Any], resume: bool = False
) -> dict[str, float]:
    """Run one profiled job and log it; return its summary metrics.

    Everything that can be rejected (device, workload arguments) is checked before the
    MLflow run starts, so bad input leaves no run behind. With `resume`, a configuration that
    already has a FINISHED run in the experiment is skipped (and an empty dict returned).
    A job that raises leaves its run FAILED, with the error as a tag and the traceback as
    `error.txt`.

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    started = time.perf_counter()
    digest = config_hash(resolved_config)
    if resume and spec.tracking.enabled:
        done = finished_run_id(spec.tracking, digest)
        if done is not None:
            log.info("skipped: this configuration already has FINISHED run %s (resume=false runs it again)", done)
            write_status(job.output_dir, status="SKIPPED", run_id=done)
            return {}
    backend = make_backend(spec.backend)
    workload = build_workload(spec.workload, backend)
    peak = resolve_peak(spec.measure.peak, backend.peak_entry(), backend.name == "cpu", spec.workload.dtype)
    capture_dir = backend.capture_dir(job.output_dir)
    manifest = build_manifest(backend.manifest())
    log.info("%s on %s (%s)", job.run_name, backend.name, backend.device_name())
    with open_run(spec.tracking, job.run_name) as run, recorded_failure(run):
        write_status(job.output_dir, run_id=run.run_id)
        run.log_params(flatten(resolved_config))
        run.set_tags({**run_tags(spec, job, backend, manifest), "runner.config_hash": digest})
        run.log_text(json.dumps(manifest, indent=2), "environment.json")
        run.log_text(OmegaConf.to_yaml(resolved_config), "config_resolved.yaml")
        if job.hydra_dir is not None:
            run.log_artifacts(job.hydra_dir, "hydra")
        backend.reset_peak_memory()
        neffs_before = backend.compiled_artifact_count()
        result = measure(workload, backend, spec, capture_dir)
        metrics, tags = derived_metrics(spec, workload, backend, result, peak)
        if neffs_before is not None:
            metrics["compile/neffs_new"] = float((backend.compiled_artifact_count() or 0) - neffs_before)
        report = backend.inspect_capture(capture_dir, spec.profiler, result.profiler_output)
        metrics.update(report.metrics)
        run.log_metrics(metrics)
        tags.update(report.tags)
        run.set_tags(tags)
        run.log_table(result.table.columns(), "key_averages.json")
        run.log_text(result.printed_table, "key_averages.txt")
        for name, text in report.texts.items():
            run.log_text(text, name)
        run.log_capture(capture_dir, capture_dir.name, spec.tracking.max_artifact_mb)
        # the whole job as this function sees it: job_s - measured_s is the runner's own cost
        metrics["time/job_s"] = time.perf_counter() - started
        run.log_metrics({"time/job_s": metrics["time/job_s"]})
        print(job_summary(job.run_name, result.table, metrics, tags, capture_dir, run.describe()), flush=True)
    write_status(job.output_dir, status="FINISHED")
    return metrics


@contextmanager
def recorded_failure(run: NullRun) -> Iterator[None]:
    """On an exception, tag the run with the error and keep the traceback, then re-raise."""
    try:
        yield
    except Exception as err:
        run.set_tags({"runner.error": one_line(err)})
        run.log_text(traceback.format_exc(), "error.txt")
        raise


def derived_metrics(
    spec: RunSpec, workload: BuiltWorkload, backend: CpuBackend, result: Measurement, peak: Peak | None
) -> tuple[dict[str, float], dict[str, Any]]:
    """Metrics and tags computed from the phases: timing, memory, accuracy, roofline."""
    metrics = result.metrics()
    peak_device = backend.peak_memory_bytes()
    if peak_device is not None:
        metrics["memory/peak_device_mb"] = peak_device / MIB
    # ru_maxrss is in KiB on Linux: the process's peak, which in a sweep run in one process
    # includes the jobs before this one
    metrics["memory/peak_host_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    by_op = self_time_by_op(result.table)
    device_time = "reported" if result.table.has_device_time else "absent: the profiler reported no device time"
    tags: dict[str, Any] = {"runner.top_op": next(iter(by_op), None), "runner.device_time": device_time}
    if spec.measure.accuracy:
        # after the phases, so compilation stays in the first call; in train_step mode the
        # module and its reference both see the updated weights
        with torch.no_grad():
            output = workload.module(*workload.inputs)
        accuracy, accuracy_tags = check_accuracy(workload.eager, workload.inputs, output, spec.workload.dtype)
        metrics.update(accuracy)
        tags.update(accuracy_tags)
    if not isinstance(workload.eager, CostModel):
        tags["roofline.peak"] = "none: the workload declares no bytes/FLOPs model"
    elif peak is None:
        tags["roofline.peak"] = f"none: no peak figure for {backend.device_name()}; set measure.peak"
    else:
        factor = TRAIN_COST_FACTOR if spec.workload.mode == "train_step" else 1
        cost = workload.eager.bytes_moved(*workload.inputs), workload.eager.flop_count(*workload.inputs)
        metrics.update(roofline_metrics(cost[0] * factor, cost[1] * factor, metrics["time/step_median_ms"], peak))
        tags["roofline.peak"] = peak.source
    return metrics, tags
