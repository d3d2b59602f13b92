"""Ops of a Neuron job that ran on the CPU instead of the NeuronCore (TorchNeuron's CPU fallback).

A CPU_FALLBACK op "runs on the CPU and the result is copied back" (DOCS-latest torch/reference/api/
supported-operators). torch.profiler records every ATen op as a host event, so the profile cannot tell
a fallback: the runner asks torch-neuronx's `get_fallback_ops()` and `clear_op_tracking()` (the reference's §5).
"""

from __future__ import annotations

from typing import Any

from runner import names
from runner.backends.base import CaptureReport

_TRACKING_CALLS = ("get_fallback_ops", "clear_op_tracking")


def _fallback_tracker() -> Any:
    """torch_neuronx where it lists its fallbacks, else None."""
    import torch_neuronx  # a Neuron job's: the backend imported it already

    return torch_neuronx if all(hasattr(torch_neuronx, call) for call in _TRACKING_CALLS) else None


def count_fallbacks_from_now() -> None:
    """Empty the list at a job's start: a sweep's earlier job in this process ran ops of its own."""
    if tracker := _fallback_tracker():
        tracker.clear_op_tracking()


def note_cpu_fallbacks(report: CaptureReport) -> None:
    """Add the distinct ops that fell back since the job started: their count, names and a warning."""
    if not (tracker := _fallback_tracker()):
        report.tags[names.TAG_NEURON_CPU_FALLBACKS] = "unknown: this torch-neuronx has no get_fallback_ops()"
        return
    ops = sorted({str(op) for op in tracker.get_fallback_ops()})
    report.metrics[names.NEURON_CPU_FALLBACK_OPS] = float(len(ops))
    report.tags[names.TAG_NEURON_CPU_FALLBACKS] = ", ".join(ops) or "none"
    if ops:
        report.warnings.append(
            f"{len(ops)} op(s) fell back to the CPU, each slower than on the NeuronCore: {', '.join(ops)}"
        )
