"""One job's steps, in data-flow order: backend, workload, measurement, result, tracking.

No Hydra in here; the job's life (status file, MLflow run, errors) belongs to `runner.job`.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from runner import CONF_DIR, names
from runner.backends.base import Backend
from runner.backends.registry import make_backend
from runner.config import ConfigError, JobInfo, RunSpec
from runner.execute.in_process import measure_job
from runner.execute.ranks import cross_rank, rank_folder, run_ranks
from runner.execute.slurm_ranks import check_world, lead, slurm_task
from runner.execute.workers import steady_state_concurrently
from runner.job import JobLife
from runner.manifest import build_manifest
from runner.measure.build import build_workload
from runner.measure.compile_cache import use_compile_cache
from runner.measure.layers import check_layer_names
from runner.measure.roofline import resolve_peak
from runner.report.console import job_summary
from runner.result import LAYER_TABLE, JobResult
from runner.secrets import redact_tree
from runner.sweep import config_hash
from runner.tracking.run import close_dead_runs, finished_run_id, flatten, git_commit

log = logging.getLogger(__name__)


def run_tags(spec: RunSpec, job: JobInfo, backend: Backend, manifest: dict[str, Any]) -> dict[str, Any]:
    """Tags that say what ran where, with which software."""
    return {
        names.TAG_WORKLOAD: job.workload_name,
        names.TAG_WORKLOAD_TARGET: spec.workload.target,
        names.TAG_BACKEND: backend.name,
        names.TAG_BACKEND_REQUESTED: spec.backend.name,
        names.TAG_DEVICE: backend.device_name(),
        names.TAG_PLACEMENT: backend.placement(),
        names.TAG_HOST: platform.node(),
        names.TAG_PID: os.getpid(),
        names.TAG_OVERRIDES: " ".join(job.overrides),
        names.TAG_OUTPUT_DIR: str(job.output_dir),
        names.TAG_GIT_COMMIT: git_commit(CONF_DIR.parent),
        **{f"{names.TAG_VERSION_PREFIX}{name}": version for name, version in manifest["packages"].items()},
        **{f"{names.TAG_VERSION_PREFIX}{name}": version for name, version in manifest["system_packages"].items()},
        f"{names.TAG_VERSION_PREFIX}python": manifest["python"],
        **{f"{names.TAG_ENV_PREFIX}{name}": value for name, value in manifest["environment"].items()},
    }


def job_plots(results: list[JobResult], folder: Path) -> Path | None:
    """A job's own plots: the ranks' steps (several ranks), the error through the layers; None if neither."""
    if len(results) == 1 and LAYER_TABLE not in results[0].tables:
        return None
    from runner.report import plots

    if len(results) > 1:
        plots.rank_steps([result.step_ms for result in results], folder / "rank_steps.png")
    if LAYER_TABLE in results[0].tables:
        plots.layer_errors(results[0].tables[LAYER_TABLE], folder / "layer_accuracy.png")
    return folder


def _rank_spec(spec: RunSpec) -> RunSpec:
    """The spec each rank runs: its own steps in its own process.

    Raises:
        ConfigError: measure.copies asks for processes of their own (measure.processes is
            refused by `Backend.worker_processes`).
    """
    ranks = spec.distributed.ranks
    if spec.measure.copies is not None:
        raise ConfigError(f"measure.copies={spec.measure.copies} and distributed.ranks={ranks}: choose one")
    return replace(spec, measure=replace(spec.measure, processes=0))


def job_params(published_config: dict[str, Any], job: JobInfo) -> dict[str, Any]:
    """The composed config as MLflow params, with the workload's short option name beside its `_target_`."""
    return {**flatten(published_config), names.PARAM_WORKLOAD_OPTION: job.workload_name}


def prepare(
    spec: RunSpec, job: JobInfo, life: JobLife, published_config: dict[str, Any], digest: str
) -> tuple[Backend, Callable[[], list[JobResult]]]:
    """The backend, and what measures the job: one result per rank (one rank unless distributed).

    Copies (`measure.copies`) are timed here, before this process touches the device: on Neuron
    the first process to start the runtime holds its NeuronCores, so the copies could not get
    them after. For `distributed.ranks` > 1 this process never touches the device: each rank
    builds its own workload. Bad input raises with no run left behind; any other failure here
    (out of memory while building the workload, a driver error, a copy that died) gets a
    FAILED run, so a sweep's comparison has a row for the job.

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    try:
        use_compile_cache(spec)  # before the backend loads its libraries, and before anything compiles
        backend = make_backend(spec.backend)
        backend.worker_processes(spec.measure.processes, spec.distributed.ranks)
        if (task := slurm_task()) is not None:  # this process is task 0 of a Slurm job of several
            check_world(task, spec.distributed.ranks)
            return backend, partial(lead, _rank_spec(spec), job.output_dir, task)
        if spec.distributed.ranks > 1:
            rank_spec = _rank_spec(spec)
            rank_slots = backend.concurrent_slots(spec.distributed.ranks, "distributed.ranks")
            return backend, partial(run_ranks, rank_spec, job.output_dir, rank_slots)
        slots = backend.concurrent_slots(spec.measure.copies) if spec.measure.copies is not None else None
        copies = steady_state_concurrently(spec, slots) if slots else None
        workload = build_workload(spec.workload, backend)
        if spec.measure.layer_accuracy:
            check_layer_names(workload.eager, spec.measure.layers)
        peak = resolve_peak(spec.measure.peak, backend, spec.workload.dtype)
        return backend, lambda: [measure_job(spec, job.output_dir, backend, workload, peak, copies)]
    except ConfigError:
        raise
    except Exception:
        with life.run(spec.tracking) as run:
            run.log_params(job_params(published_config, job))
            run.set_tags({names.TAG_CONFIG_HASH: digest, names.TAG_WORKLOAD: job.workload_name})
            raise


def run_experiment(
    spec: RunSpec, job: JobInfo, resolved_config: dict[str, Any], life: JobLife | None = None, resume: bool = False
) -> dict[str, float]:
    """Run one profiled job and log it; return its summary metrics.

    Everything that can be rejected (device, workload arguments) is checked before the
    MLflow run starts, so bad input leaves no run behind. With `resume`, a configuration that
    already has a FINISHED run in the experiment is skipped (and an empty dict returned).

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    started = time.perf_counter()
    life = life or JobLife(job)
    digest = config_hash(resolved_config)
    published_config = redact_tree(resolved_config)
    if resume and spec.tracking.enabled:
        done = finished_run_id(spec.tracking, digest)
        if done is not None:
            log.info("skipped: this configuration already has FINISHED run %s (resume=false runs it again)", done)
            life.skip(done)
            return {}
    backend, measure_ranks = prepare(spec, job, life, published_config, digest)
    if spec.tracking.enabled and not resume:  # (a resumed job closed them above)
        close_dead_runs(spec.tracking, digest)
    manifest = build_manifest(backend.manifest())
    ranks = spec.distributed.ranks
    placement = backend.placement() if ranks == 1 else f"{ranks} ranks, each on its own share of the machine"
    log.info("%s on %s (%s)", job.run_name, backend.name, placement)
    with life.run(spec.tracking) as run:
        run.log_params(job_params(published_config, job))
        run.set_tags({**run_tags(spec, job, backend, manifest), names.TAG_CONFIG_HASH: digest})
        run.log_text(json.dumps(manifest, indent=2), "environment.json")
        run.log_text(OmegaConf.to_yaml(published_config), "config_resolved.yaml")
        if job.hydra_dir is not None:
            run.log_artifacts(job.hydra_dir, "hydra")
        result, *other_ranks = measure_ranks()
        if other_ranks:  # rank 0 is the job's result; the others go under rank<k>/
            metrics, tags = cross_rank([result, *other_ranks])
            result.metrics.update(metrics)
            result.tags.update(tags)
        run.log_result(result, spec.tracking.max_artifact_mb)
        if plots := job_plots([result, *other_ranks], job.output_dir / "plots"):
            run.log_artifacts(plots, "plots")
        for rank, other in enumerate(other_ranks, 1):
            run.log_result(other, spec.tracking.max_artifact_mb, rank_folder(rank))
        # the whole job as this function sees it: job_s - measured_s is the runner's own cost
        result.metrics[names.JOB_S] = time.perf_counter() - started
        run.log_metrics({names.JOB_S: result.metrics[names.JOB_S]})
        print(job_summary(job.run_name, placement, result, run.describe()), flush=True)
    return result.metrics
