"""Ops of a Neuron job that ran on the CPU instead of the NeuronCore (TorchNeuron's CPU fallback).

A CPU_FALLBACK op "runs on the CPU and the result is copied back" (DOCS-latest torch/reference/api/
supported-operators). torch.profiler records every ATen op as a host event, so the profile cannot tell
a fallback: the runner asks torch-neuronx's `get_fallback_ops()` and `clear_op_tracking()` (the reference's §5).
"""

from __future__ import annotations

from runner import names
from runner.backends.base import CaptureReport

TRACKING_CALLS = ("get_fallback_ops", "clear_op_tracking")


def tracks_fallbacks() -> bool:
    """Whether this torch-neuronx lists its fallbacks."""
    import torch_neuronx  # a Neuron job's: the backend imported it already

    return all(hasattr(torch_neuronx, call) for call in TRACKING_CALLS)


def count_fallbacks_from_now() -> None:
    """Empty the list at a job's start: a sweep's earlier job in this process ran ops of its own."""
    if tracks_fallbacks():
        import torch_neuronx

        torch_neuronx.clear_op_tracking()


def note_cpu_fallbacks(report: CaptureReport) -> None:
    """Add the distinct ops that fell back since the job started: their count, names and a warning."""
    if not tracks_fallbacks():
        report.tags[names.TAG_NEURON_CPU_FALLBACKS] = "unknown: this torch-neuronx has no get_fallback_ops()"
        return
    import torch_neuronx

    ops = sorted({str(op) for op in torch_neuronx.get_fallback_ops()})
    report.metrics[names.NEURON_CPU_FALLBACK_OPS] = float(len(ops))
    report.tags[names.TAG_NEURON_CPU_FALLBACKS] = ", ".join(ops) or "none"
    if ops:
        report.warnings.append(
            f"{len(ops)} op(s) fell back to the CPU, each slower than on the NeuronCore: {', '.join(ops)}"
        )
