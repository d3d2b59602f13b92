"""A configuration's runs as a series over time: one point per FINISHED job run, and where the series stepped.

The history command (`runner.history`) and its plot both read through here.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from mlflow import MlflowClient
from mlflow.entities import Run

from runner import names
from runner.measure.stats import geometric_interval
from runner.report.change_points import ChangePoint, change_points
from runner.report.reader import configuration, label, metric, rounds

# metrics where a fall is the regression (rates and shares of a peak); for every other one, a rise
HIGHER_IS_BETTER = ("_per_s", "gbps", "gflops", "_fraction")


@dataclass(frozen=True)
class Point:
    """One run of the series: its value of the metric, its 95% interval where it has one, its timing verdict."""

    run_id: str
    name: str
    commit: str  # the run's runner.git_commit ('-dirty' when the tree had changes), '-' when not tagged
    start_time: int
    value: float
    interval: tuple[float, float] | None
    stable: bool  # False only for runs tagged timing.stable=false


@dataclass(frozen=True)
class Step:
    """A change point, and the runs either side of it: the older segment's last, the newer's first."""

    change: ChangePoint
    before: Point
    after: Point


@dataclass
class Series:
    """A configuration's points in order, which of them the change points were found on, and the steps."""

    config_hash: str
    label: str
    points: list[Point]
    used: list[int] = field(default_factory=list)  # positions in `points` of the points the change points were found on
    steps: list[Step] = field(default_factory=list)
    # why points were left out of the change points, and the ids of their runs
    left_out: dict[str, list[str]] = field(default_factory=dict)

    def segments(self) -> list[list[int]]:
        """The used points' positions, split at each step: the oldest segment first."""
        cuts = [0, *(self.used.index(self.points.index(step.after)) for step in self.steps), len(self.used)]
        return [self.used[start:end] for start, end in zip(cuts, cuts[1:], strict=False) if end > start]


def worse_by(step: Step, key: str) -> float:
    """How much worse the newer segment is than the older, as a fraction (negative: better)."""
    return -step.change.change if key.endswith(HIGHER_IS_BETTER) else step.change.change


def job_runs(client: MlflowClient, experiment_id: str, key: str) -> list[Run]:
    """The experiment's FINISHED job runs (no sweep parents, doctor or history runs) that logged `key`."""
    runs = client.search_runs([experiment_id], "attributes.status = 'FINISHED'", max_results=50000)
    return [
        run
        for run in runs
        if run.data.tags.get(names.TAG_SWEEP) != "true"
        and run.data.tags.get(names.TAG_KIND, names.KIND_JOB) == names.KIND_JOB
        and names.TAG_CONFIG_HASH in run.data.tags
        and metric(run, key) is not None
    ]


def point(client: MlflowClient, run: Run, key: str) -> Point:
    """The run as a point; a step-time run's interval comes from its per-process medians."""
    value = metric(run, key)
    assert value is not None  # job_runs keeps runs that logged it
    interval = geometric_interval(rounds(client, run).in_order()) if key == names.STEP_MEDIAN_MS else None
    commit, stable = run.data.tags.get(names.TAG_GIT_COMMIT, "-"), run.data.tags.get(names.TAG_TIMING_STABLE) != "false"
    return Point(run.info.run_id, label(run), commit, run.info.start_time, value, interval, stable)


def by_configuration(runs: list[Run]) -> dict[str, list[Run]]:
    """The runs grouped by config hash and step clock (`runner.report.reader.configuration`)."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        groups[configuration(run)].append(run)
    return dict(groups)


def find_steps(series: Series, include_unstable: bool) -> None:
    """Fill in the points the change points are found on, what was left out and why, and the steps."""
    series.used, series.left_out = [], {}
    for position, found in enumerate(series.points):
        why = "not positive" if found.value <= 0 else None if found.stable or include_unstable else "timing unstable"
        if why is None:
            series.used.append(position)
        else:
            series.left_out.setdefault(why, []).append(found.run_id)
    values = [series.points[position].value for position in series.used]
    series.steps = [
        Step(found, series.points[series.used[found.index - 1]], series.points[series.used[found.index]])
        for found in change_points(values)
    ]


def in_order(points: list[Point], commits: list[str] | None) -> tuple[list[Point], int]:
    """The points by start time, or by commit (`commits`: oldest first; others are left out) then start time."""
    if commits is None:
        return sorted(points, key=lambda p: p.start_time), 0
    position = {commit: index for index, commit in enumerate(commits)}
    placed = [p for p in points if p.commit.removesuffix("-dirty") in position]
    placed.sort(key=lambda p: (position[p.commit.removesuffix("-dirty")], p.start_time))
    return placed, len(points) - len(placed)
