"""Ops of a Neuron job that ran on the CPU instead of the NeuronCore (TorchNeuron's CPU fallback).

TorchNeuron's supported-operators page (DOCS-latest torch/reference/api/supported-operators):
an op marked CPU_FALLBACK "works, but the named ATen operator runs on the CPU and the result
is copied back to the Neuron device"; its best-practices page: unsupported ops fall back to
the CPU by default and cost performance. torch.profiler records every ATen op as a host event
whichever device computes it, so the profile cannot tell a fallback: the runner asks
torch-neuronx, whose `get_fallback_ops()` lists "operations that fell back to CPU" and
`clear_op_tracking()` resets that list (SRC torch_neuronx/__init__.py; the reference's §5).
"""

from __future__ import annotations

from runner import names
from runner.backends.base import CaptureReport

# the two calls the count needs; a torch-neuronx without them is said so in the tag
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
