"""What a run records is documented: every metric name the runner logs (runner/names.py) is named in docs/."""

from __future__ import annotations

import re

from runner import names
from tests.helpers import REPO

# a metric's name: a namespace and a name (`time/step_median_ms`); the system series' templated
# names (`system/neuron/core{core}/...`) are documented as patterns, in optional_measurements.md's table
METRIC = re.compile(r"[a-z]+/[a-z_]+")


def test_every_metric_the_runner_logs_is_named_in_the_docs() -> None:
    metrics = {value for value in vars(names).values() if isinstance(value, str) and METRIC.fullmatch(value)}
    assert {names.STEP_MEDIAN_MS, names.PROFILER_ACTIVE_STEPS, names.ACCURACY_TOLERANCE} <= metrics
    documented = "\n".join(page.read_text() for page in (REPO / "docs").glob("*.md"))
    assert sorted(metric for metric in metrics if f"`{metric}`" not in documented) == []
