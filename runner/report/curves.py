"""Shape curves: each variant's runs by bytes moved, and where one variant overtakes another.

A sweep over three sizes or more (`+experiment=rmsnorm_shapes`) gets `plots/shape_curves.png` and
`crossovers.md`. A crossover is claimed only where each winner is significant by the comparison's own
test, both runs' timing stable: a flip inside the noise is not one.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.job import JobStatus
from runner.measure.stats import SIGNIFICANCE
from runner.report.pairing import compare_times
from runner.report.reader import metric, rounds, variant

_MIN_SIZES = 3


@dataclass(frozen=True)
class Crossover:
    """Between two sizes (bytes moved), the significantly faster variant changes."""

    before: str
    after: str
    bytes_low: float
    bytes_high: float

    def line(self) -> str:
        """One readable sentence."""
        return (
            f"{self.after} overtakes {self.before} between {_size(self.bytes_low)} and {_size(self.bytes_high)} moved"
        )


def _size(count: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.3g} {unit}"
    return f"{count:.0f} B"


def _same_shape(run: Run) -> str:
    """What pairs runs of different variants: their overrides less the workload (not bytes: two shapes move as many)."""
    overrides = run.data.tags.get(names.TAG_OVERRIDES, "").split()
    return " ".join(sorted(o for o in overrides if not o.lstrip("+").startswith("workload=")))


def _by_variant(runs: list[Run]) -> dict[str, list[Run]]:
    """Finished runs with a roofline and a step time, per variant."""
    curves: dict[str, list[Run]] = {}
    for run in (r for r in runs if r.info.status == JobStatus.FINISHED):
        if metric(run, names.ROOFLINE_BYTES) and metric(run, names.STEP_MEDIAN_MS):
            curves.setdefault(variant(run), []).append(run)
    return curves


def _sizes(curve: list[Run]) -> int:
    return len({metric(r, names.ROOFLINE_BYTES) for r in curve})


def size_curves(runs: list[Run]) -> dict[str, list[Run]]:
    """Finished runs with a roofline, per variant, by bytes moved; variants with fewer than three sizes left out."""
    return {
        name: sorted(curve, key=lambda r: metric(r, names.ROOFLINE_BYTES) or 0.0)
        for name, curve in sorted(_by_variant(runs).items())
        if _sizes(curve) >= _MIN_SIZES
    }


def too_few_sizes(runs: list[Run]) -> str | None:
    """Why a sweep over sizes gets no shape curves: its variants ran at two sizes, fewer than three."""
    most = max((_sizes(curve) for curve in _by_variant(runs).values()), default=0)
    if not 1 < most < _MIN_SIZES:
        return None
    return (
        f"Shape curves: none (no plots/shape_curves.png, no crossovers): a variant needs {_MIN_SIZES} sizes "
        f"or more, this sweep ran each at {most} at most"
    )


def faster(client: MlflowClient, a: Run, b: Run) -> str | None:
    """The variant significantly faster of two runs at one size; None when the data cannot say."""
    if "false" in (a.data.tags.get(names.TAG_TIMING_STABLE), b.data.tags.get(names.TAG_TIMING_STABLE)):
        return None
    estimate = compare_times(rounds(client, a), rounds(client, b)).estimate
    if estimate is None or estimate.p_value >= SIGNIFICANCE:
        return None
    return variant(b) if estimate.ratio < 1 else variant(a)


def crossovers(client: MlflowClient, curves: dict[str, list[Run]]) -> list[Crossover]:
    """Every significant change of winner between two variants along the sizes they share."""
    found = []
    for runs_a, runs_b in itertools.combinations(curves.values(), 2):
        by_shape_b = {_same_shape(r): r for r in runs_b}
        last: tuple[str, float] | None = None
        for run_a in runs_a:
            size = metric(run_a, names.ROOFLINE_BYTES) or 0.0
            run_b = by_shape_b.get(_same_shape(run_a))
            winner = faster(client, run_a, run_b) if run_b is not None else None
            if winner is None:
                continue
            if last is not None and winner != last[0]:
                found.append(Crossover(last[0], winner, last[1], size))
            last = (winner, size)
    return sorted(found, key=lambda c: c.bytes_low)


def crossover_report(found: list[Crossover], curves: dict[str, list[Run]]) -> str:
    """The crossovers as Markdown lines (or why there are none)."""
    sizes = sorted({metric(r, names.ROOFLINE_BYTES) or 0.0 for runs in curves.values() for r in runs})
    head = f"Crossovers over {len(sizes)} sizes ({_size(sizes[0])} to {_size(sizes[-1])} moved per step):"
    processes = {str(r.data.params.get("measure.processes")) for runs in curves.values() for r in runs}
    if not found and processes <= {"0", "1"}:  # one steady-state sample per run: nothing to test
        return f"{head} could not test (one sample per run with measure.processes={min(processes)}; needs 2 or more)"
    if not found:
        return f"{head} none significant (paired by round, or Welch on per-process medians; p < {SIGNIFICANCE})"
    return "\n".join([head, *(f"- {c.line()}" for c in found)])
