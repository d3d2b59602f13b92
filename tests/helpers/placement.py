"""A workload that reports where its process runs: the cores it may use and torch's threads."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch
from torch import nn


class PlacementProbe(nn.Module):
    """Writes `<folder>/<pid>.json` with its process's cores and torch thread count when built."""

    def __init__(self, folder: str) -> None:
        super().__init__()
        place = {"cores": sorted(os.sched_getaffinity(0)), "threads": torch.get_num_threads(), "at": time.monotonic()}
        (Path(folder) / f"{os.getpid()}.json").write_text(json.dumps(place))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2.0


def placements(folder: Path) -> list[dict[str, object]]:
    """The cores and threads each process reported, in the order they built the probe."""
    reports = [json.loads(path.read_text()) for path in folder.glob("*.json")]
    reports.sort(key=lambda report: report["at"])
    return [{"cores": report["cores"], "threads": report["threads"]} for report in reports]
