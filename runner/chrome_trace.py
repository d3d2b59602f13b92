"""Reading a Chrome trace file, for measurement (the profiled window's) and the backends (a capture's) alike.

It sits in the shared base, not in `runner.measure.traces`, so the Neuron backend reads its capture's
framework traces with it without importing measurement.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_chrome_trace(path: Path) -> dict[str, Any] | None:
    """The Chrome trace in `path`; None when the file is other JSON, or not JSON."""
    with path.open() as f:
        try:
            document = json.load(f)
        except json.JSONDecodeError:
            return None
    return document if isinstance(document, dict) and "traceEvents" in document else None
