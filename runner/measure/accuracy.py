"""Compare a workload's output with its float64 reference on CPU; a failure is a finding (a tag), never raised."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from runner import names

# Normwise relative tolerance per dtype, about a few units in the last place after a reduction.
TOLERANCE = {"float64": 1e-10, "float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def check_accuracy(
    eager: nn.Module, inputs: tuple[torch.Tensor, ...], output: Any, dtype: str
) -> tuple[dict[str, float], dict[str, str]]:
    """`accuracy/*` metrics and the `accuracy.check` tag; max_rel_err is normwise, so values near 0 do not dominate."""
    reference = getattr(eager, "reference", None)
    if reference is None or not isinstance(output, torch.Tensor):
        return {}, {names.TAG_ACCURACY: "skipped", names.TAG_ACCURACY_DETAIL: "the workload has no reference()"}
    with torch.no_grad():
        expected = reference(*inputs)
    if expected is None:
        return {}, {names.TAG_ACCURACY: "skipped", names.TAG_ACCURACY_DETAIL: "the output's values are undefined"}
    expected = expected.to("cpu", torch.float64)
    actual = output.detach().to("cpu", torch.float64)
    if actual.shape != expected.shape:
        detail = f"output shape {tuple(actual.shape)} != reference {tuple(expected.shape)}"
        return {}, {names.TAG_ACCURACY: "fail", names.TAG_ACCURACY_DETAIL: detail}
    max_abs = (actual - expected).abs().max().item()
    scale = expected.abs().max().item() or 1.0
    tolerance = TOLERANCE[dtype]
    max_rel = max_abs / scale
    verdict = "pass" if max_rel <= tolerance else "fail"
    metrics = {
        names.ACCURACY_MAX_ABS_ERR: max_abs,
        names.ACCURACY_MAX_REL_ERR: max_rel,
        names.ACCURACY_TOLERANCE: tolerance,
    }
    detail = f"max_rel_err {max_rel:.2e} against tolerance {tolerance:g} for {dtype}"
    return metrics, {names.TAG_ACCURACY: verdict, names.TAG_ACCURACY_DETAIL: detail}


def check_finite(output: Any) -> dict[str, str]:
    """The `runner.output_finite` tag: "true", or how many output elements are NaN or infinite (reference or not)."""
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else [output]
    tensors = [t for t in values if isinstance(t, torch.Tensor) and t.is_floating_point()]
    bad = sum(int((~torch.isfinite(t.detach())).sum().item()) for t in tensors)
    total = sum(t.numel() for t in tensors)
    return {names.TAG_OUTPUT_FINITE: "true" if not bad else f"false: {bad} of {total} elements are NaN or infinite"}


def finite_warning(finite: str) -> str | None:
    """The warning for a `runner.output_finite` tag: None when "true", else how many elements are not finite."""
    return None if finite == "true" else f"the workload's output is not finite: {finite.removeprefix('false: ')}"
