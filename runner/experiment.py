"""One job's steps in data-flow order (backend, workload, measurement, result, tracking); no Hydra: see `runner.job`."""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from pathlib import Path
from typing import Any

from mlflow.entities import Run
from omegaconf import OmegaConf

from runner import CONF_DIR, names
from runner.config import ConfigError, RunSpec
from runner.execute.plan import Execution, plan
from runner.job import THIS_PROCESS, JobInfo, JobLife, close_dead_runs, config_hash, finished_run_id
from runner.job.manifest import build_manifest
from runner.job.status import JobStatus
from runner.measure.result import JobResult, PhaseError, judge_timing
from runner.report.console import job_summary
from runner.secrets import redact_tree
from runner.tracking.run import flatten, git_commit

log = logging.getLogger(__name__)


def _run_tags(spec: RunSpec, job: JobInfo, execution: Execution, manifest: dict[str, Any]) -> dict[str, Any]:
    """Tags that say what ran where, with which software."""
    backend = execution.backend
    return {
        names.TAG_WORKLOAD: job.workload_name,
        names.TAG_WORKLOAD_TARGET: spec.workload.target,
        names.TAG_BACKEND: backend.traits.name,
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


def earlier_medians(runs: list[Run]) -> list[float]:
    """The configuration's FINISHED medians on this host at this commit, newest first: what the host's drift did."""
    commit = git_commit(CONF_DIR.parent)
    mine = [
        run
        for run in runs
        if run.info.status == JobStatus.FINISHED
        and run.data.tags.get(names.TAG_HOST) == platform.node()
        and run.data.tags.get(names.TAG_GIT_COMMIT) == commit
        and names.STEP_MEDIAN_MS in run.data.metrics
    ]
    return [run.data.metrics[names.STEP_MEDIAN_MS] for run in sorted(mine, key=lambda r: -r.info.start_time)]


def _job_plots(results: list[JobResult], folder: Path) -> Path | None:
    """A job's own plots: the ranks' steps (several ranks), the error through the layers; None if neither."""
    if len(results) == 1 and names.LAYER_TABLE_FILE not in results[0].tables:
        return None
    from runner.report import plots

    if len(results) > 1:
        plots.save(plots.rank_steps_figure([result.step_ms for result in results]), folder / names.RANK_STEPS_PLOT_FILE)
    if names.LAYER_TABLE_FILE in results[0].tables:
        plots.save(plots.layer_errors_figure(results[0].tables[names.LAYER_TABLE_FILE]), folder / names.LAYER_PLOT_FILE)
    return folder


def _job_params(published_config: dict[str, Any], job: JobInfo) -> dict[str, Any]:
    """The composed config as MLflow params, with the workload's short option name beside its `_target_`."""
    return {**flatten(published_config), names.PARAM_WORKLOAD_OPTION: job.workload_name}


def _prepare(spec: RunSpec, job: JobInfo, life: JobLife, published_config: dict[str, Any], digest: str) -> Execution:
    """How the job is measured (`runner.execute.plan`), planned before its run opens.

    Bad input leaves no run behind; any other failure gets a FAILED run, so a sweep's comparison has its row.

    Raises:
        ConfigError: the config cannot run here; the message names the key.
    """
    try:
        return plan(spec, job.output_dir, digest, job.rounds_dir)
    except ConfigError:
        raise
    except Exception:
        with life.run(spec.tracking) as run:
            run.log_params(_job_params(published_config, job))
            run.set_tags({names.TAG_CONFIG_HASH: digest, names.TAG_WORKLOAD: job.workload_name})
            raise


def run_experiment(
    spec: RunSpec, job: JobInfo, resolved_config: dict[str, Any], life: JobLife | None = None, resume: bool = False
) -> dict[str, float]:
    """Run one profiled job and log it; return its summary metrics.

    Bad input is refused before the MLflow run starts, and so is a job that an earlier one in this process
    would make run on other settings. With `resume`, a configuration with a FINISHED run is skipped ({}).

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
    with THIS_PROCESS.job(spec.backend.name, resolved_config, job.run_name):  # refused if it would share wrongly
        execution = _prepare(spec, job, life, published_config, digest)
    earlier_ms: list[float] = []
    if spec.tracking.enabled and not resume:  # (a resumed job closed them above, and has no FINISHED run)
        earlier_ms = earlier_medians(close_dead_runs(spec.tracking, digest))
    manifest = build_manifest(execution.backend, spec)
    log.info("%s on %s (%s)", job.run_name, execution.backend.traits.name, execution.placement)
    with life.run(spec.tracking) as run:
        run.log_params(_job_params(published_config, job))
        run.set_tags({**_run_tags(spec, job, execution, manifest), names.TAG_CONFIG_HASH: digest})
        run.log_text(json.dumps(manifest, indent=2), names.ENVIRONMENT_FILE)
        run.log_text(OmegaConf.to_yaml(published_config), names.CONFIG_FILE)
        if job.hydra_dir is not None:
            run.log_artifacts(job.hydra_dir, names.HYDRA_FOLDER)
        try:
            measured = execution.run()
        except PhaseError as err:  # what the phases before it measured is kept; the run still closes FAILED
            if err.partial is not None:
                judge_timing(err.partial, spec, execution.backend, earlier_ms)
                run.log_result(err.partial, spec.tracking.max_artifact_mb)
                log.error("%s failed; the run keeps what the phases before it measured", err.phase)
            raise
        result = measured.result
        judge_timing(result, spec, execution.backend, earlier_ms)
        run.log_result(result, spec.tracking.max_artifact_mb)
        if plots := _job_plots(measured.every_rank, job.output_dir / names.PLOTS_FOLDER):
            run.log_artifacts(plots, names.PLOTS_FOLDER)
        for folder, other in measured.other_ranks.items():
            run.log_result(other, spec.tracking.max_artifact_mb, folder)
        # the whole job as this function sees it: job_s - measured_s is the runner's own cost
        result.metrics[names.JOB_S] = time.perf_counter() - started
        run.log_metrics({names.JOB_S: result.metrics[names.JOB_S]})
        print(job_summary(job.run_name, execution.placement, result, run.describe()), flush=True)
    return result.metrics
