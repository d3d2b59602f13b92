"""Is a run's step time comparable? `timing.stable`: the median's interval from its blocks' medians (docs/trust.md)."""

from __future__ import annotations

import numpy as np

from runner.backends.base import Backend
from runner.config import RunSpec
from runner.measure.loop import stretch_ends

# blocks of consecutive steps per process and repeat (a CPU worker's memory layouts: one each)
BLOCKS = 8
# the "5% off" a user bets on: the median's interval may be at most this wide on either side
MAX_UNCERTAINTY = 0.05


def block_medians(step_ms: list[list[list[float]]]) -> list[float]:
    """The median of each of `BLOCKS` equal runs of consecutive steps, per process and repeat."""
    medians = []
    for process in step_ms:
        for repeat in process:
            ends = stretch_ends(len(repeat), min(BLOCKS, len(repeat)))
            medians += [float(np.median(repeat[start:end])) for start, end in zip([0, *ends], ends, strict=False)]
    return medians


def median_uncertainty(step_ms: list[list[list[float]]]) -> float:
    """About the 95% half-width of the run's median, relative: two standard errors of its blocks' log mean (or 0)."""
    logs = np.log(block_medians(step_ms))
    if len(logs) < 2:
        return 0.0
    return float(np.expm1(2 * logs.std(ddof=1) / np.sqrt(len(logs))))


def instability_reasons(step_ms: list[list[list[float]]]) -> list[str]:
    """Why this run's step time should not be compared; empty when it can be."""
    uncertainty = median_uncertainty(step_ms)
    if uncertainty > MAX_UNCERTAINTY:
        return [f"its median is uncertain by about {uncertainty:.1%} (over {MAX_UNCERTAINTY:.0%})"]
    return []


def instability_advice(spec: RunSpec, backend: Backend) -> str:
    """What to rerun an unstable job with: the backend says what its device accepts (`steadier_measurement`)."""
    return f"rerun on an idle machine with {backend.steadier_measurement(spec)}"
