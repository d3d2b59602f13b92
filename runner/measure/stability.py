"""Is a run's step time a number one can compare? The verdict behind the tag `timing.stable`.

One question: how far could this run's median be from the one the next run reads? The steps
of each process (and repeat) are cut into `BLOCKS` blocks where a CPU worker moves its memory
(runner.measure.loop.timed_steps), so the blocks differ by memory layout, by the host's drift
and by process; the spread of their medians gives the median an interval. Over `MAX_UNCERTAINTY`
the run is unstable. Slow single steps (a tail) move no block's median and flag nothing; a slow
mode that holds for whole blocks, or processes that disagree, widen the interval and do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from runner.measure.loop import stretch_ends

if TYPE_CHECKING:
    from runner.backends.base import Backend
    from runner.config import RunSpec

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
    """About the 95% half-width of the run's median, relative: two standard errors of its blocks' log mean.

    0 where there are fewer than two blocks (nothing to tell the spread from).
    """
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
