"""The checks that follow a job's phases (its output, accuracy, roofline, layers), collected into its `JobResult`.

Each check is a phase of its own: a failing one keeps the result of those before it.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.distributed as dist

from runner import names
from runner.backends.base import Backend, CaptureReport
from runner.backends.peaks import Peak
from runner.config import RunSpec
from runner.measure.accuracy import check_accuracy, check_finite, finite_warning
from runner.measure.build import BuiltWorkload
from runner.measure.collectives import collective_bandwidth
from runner.measure.layers import first_failing, layer_errors, layer_table
from runner.measure.measurement import Measurement
from runner.measure.result import JobResult, phase, timing_result
from runner.measure.roofline import over_peak, roofline_metrics
from workloads.base import CostModel

# A training step costs about three forwards: the backward computes gradients for both the
# inputs and the weights (twice the forward's matmul FLOPs) and reads and writes as much again.
_TRAIN_COST_FACTOR = 3


def _model_metrics(
    spec: RunSpec, workload: BuiltWorkload, backend: Backend, peak: Peak | None, result: JobResult
) -> None:
    """Add what the workload's model of itself gives: collective bandwidth (ranks) and the roofline."""
    metrics, tags = result.metrics, result.tags
    collective_bytes = getattr(workload.eager, "collective_bytes", None)
    if collective_bytes is not None and dist.is_initialized() and metrics[names.STEP_MEDIAN_MS]:
        step_ms, bytes_moved = metrics[names.STEP_MEDIAN_MS], collective_bytes(*workload.inputs)
        bandwidth, link = collective_bandwidth(bytes_moved, step_ms, dist.get_world_size(), peak, backend.ranks_cores())
        metrics.update(bandwidth)
        tags.update(link)
    if not isinstance(workload.eager, CostModel):
        tags[names.TAG_ROOFLINE_PEAK] = "none: the workload declares no bytes/FLOPs model"
    elif peak is None:
        tags[names.TAG_ROOFLINE_PEAK] = f"none: no peak figure for {backend.device_name()}; set measure.peak"
    else:
        factor = _TRAIN_COST_FACTOR if spec.workload.mode == "train_step" else 1
        cost = workload.eager.bytes_moved(*workload.inputs), workload.eager.flop_count(*workload.inputs)
        metrics.update(roofline_metrics(cost[0] * factor, cost[1] * factor, metrics[names.STEP_MEDIAN_MS], peak))
        tags[names.TAG_ROOFLINE_PEAK] = peak.source


def collect_result(
    spec: RunSpec,
    workload: BuiltWorkload,
    backend: Backend,
    measurement: Measurement,
    peak: Peak | None,
    capture: CaptureReport,
    capture_dir: Path,
) -> JobResult:
    """One result from the phases, the backend's capture report and the checks that follow, each a phase of its own.

    Raises:
        PhaseError: a check failed; it carries the result up to it.
    """
    result = timing_result(spec, backend, measurement, capture_dir)
    metrics, tags = result.metrics, result.tags
    metrics.update(capture.metrics)
    tags.update(capture.tags)
    result.texts.update(capture.texts)

    def so_far() -> JobResult:
        """The result as the checks before the failing one left it."""
        return result

    # after the phases, so compilation stays in the first call; module and reference share the trained weights
    with phase("output check", so_far), torch.no_grad():
        output = workload.module(*workload.inputs)
    tags.update(check_finite(output))
    if spec.measure.accuracy:
        with phase("accuracy", so_far):
            accuracy, accuracy_tags = check_accuracy(workload.eager, workload.inputs, output, spec.workload.dtype)
        metrics.update(accuracy)
        tags.update(accuracy_tags)
    with phase("roofline", so_far):
        _model_metrics(spec, workload, backend, peak, result)
    if spec.measure.layer_accuracy:
        with phase("layer accuracy", so_far):
            errors = layer_errors(workload.eager, workload.inputs, spec.workload.dtype, spec.measure.layers)
        result.tables[names.LAYER_TABLE_FILE] = layer_table(errors)
        tags[names.TAG_FIRST_FAILING_LAYER] = first_failing(errors) or "none"
        metrics[names.LAYERS_FAILING] = float(sum(not error.passed for error in errors))
    result.warnings = list(capture.warnings)
    if warning := finite_warning(str(tags.get(names.TAG_OUTPUT_FINITE, "true"))):
        result.warnings.append(warning)
    if over := over_peak(metrics):
        result.warnings.append(
            f"roofline above 100% ({'; '.join(over)}): the peak ({tags[names.TAG_ROOFLINE_PEAK]}) reads low; "
            "a CPU calibration taken on a busy host does: python -m runner.doctor measures it again"
        )
    return result
