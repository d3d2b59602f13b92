"""What the gate and the history judge besides the step time: the output, its accuracy, the first call, peak memory.

A run logs whether its output was finite (`runner.output_finite`), its accuracy check against the
float64 reference (`accuracy.check`), its first call's seconds (`time/first_call_s`, compilation
included) and its peak memory. Each becomes a line of the verdict of its own: `checks` reads the
candidate's values against its baseline's, from stored runs (`logged`) or from the check worker each
side of `gate --against` runs once. A wrong output fails whatever the times say; the first call and
the host's memory peak are one sample a side, so their lines inform and never fail (docs/gate.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from mlflow.entities import Run

from runner import names

# tags and metrics by their names, as a run logs them: what the checks read of a side
Logged = Mapping[str, str | float]


@dataclass(frozen=True)
class Check:
    """One line of a verdict besides the step time, and whether it fails the gate."""

    text: str
    failed: bool = False


def logged(run: Run | None) -> dict[str, str | float]:
    """A run's tags and metrics by name (none for no run); a NaN metric reads as not recorded."""
    if run is None:
        return {}
    metrics = {key: value for key, value in run.data.metrics.items() if not math.isnan(value)}
    return {**run.data.tags, **metrics}


def _output(base: Logged, new: Logged) -> Check | None:
    """Non-finite output fails unless the baseline's was non-finite too (an output whose values are undefined)."""
    value, before = new.get(names.TAG_OUTPUT_FINITE), base.get(names.TAG_OUTPUT_FINITE)
    if value is None:
        return None
    if value == "true":
        return Check("output: finite")
    detail = str(value).removeprefix("false: ")
    if before is not None and before != "true":
        return Check(f"output: not finite ({detail}), as the baseline's: not new")
    baseline = "finite" if before == "true" else "not recorded"
    return Check(f"output: NOT FINITE ({detail}); the baseline's {baseline}", failed=True)


def _accuracy(base: Logged, new: Logged) -> Check | None:
    """A failed accuracy check fails, the baseline's failing too or not: the reference says the output is wrong."""
    value = new.get(names.TAG_ACCURACY)
    if value is None:
        return None
    detail = new.get(names.TAG_ACCURACY_DETAIL, "")
    if value != "fail":
        return Check(f"accuracy: {value} ({detail})")
    return Check(f"accuracy: FAILED ({detail}); the baseline's {base.get(names.TAG_ACCURACY, 'not recorded')}", True)


def _ratio(what: str, key: str, unit: str, base: Logged, new: Logged, margin: float | None) -> Check | None:
    """`what` of both sides and their ratio; judged against `margin` when one is given, else information."""
    before, value = base.get(key), new.get(key)
    if not isinstance(before, float) or not isinstance(value, float) or before <= 0:
        return None
    change = value / before - 1
    said = f"{what}: {value:.4g} {unit} against {before:.4g} {unit} ({change:+.1%})"
    if margin is None:
        return Check(f"{said}: one sample a side, information, not judged")
    if change > margin:
        return Check(f"{said}: MORE than the +{margin:.0%} margin", failed=True)
    return Check(f"{said}: within the +{margin:.0%} margin")


def checks(base: Logged, new: Logged, margin: float) -> list[Check]:
    """The candidate's lines against its baseline's, each only where recorded (the ratios: on both sides).

    The device's memory peak is the allocator's high-water mark, the same for the same code and shapes,
    so one sample a side is judged against `margin`. The first call (compilation, cold or warm caches)
    and the host's peak RSS (imports, and in a one-process sweep the jobs before) vary run to run.
    """
    found = [
        _output(base, new),
        _accuracy(base, new),
        _ratio("first call", names.FIRST_CALL_S, "s", base, new, None),
        _ratio("peak device memory", names.PEAK_DEVICE_MB, "MB", base, new, margin),
        _ratio("peak host memory (RSS)", names.PEAK_HOST_RSS_MB, "MB", base, new, None),
    ]
    return [check for check in found if check is not None]
