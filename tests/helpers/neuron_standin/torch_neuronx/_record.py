"""The stand-in's call log: in memory, and as JSON lines in $NEURON_STANDIN_LOG."""

from __future__ import annotations

import json
import os
from typing import Any

CALLS: list[dict[str, Any]] = []


def record(event: str, **data: Any) -> None:
    entry = {"event": event, **data}
    CALLS.append(entry)
    path = os.environ.get("NEURON_STANDIN_LOG")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(entry) + "\n")


def faults() -> set[str]:
    return {f for f in os.environ.get("NEURON_STANDIN_FAULT", "").split(",") if f}


def deviates(assumption: str) -> bool:
    """Whether $NEURON_STANDIN_DEVIATE flips this documented assumption (README, "Deviations")."""
    return assumption in os.environ.get("NEURON_STANDIN_DEVIATE", "").split(",")
