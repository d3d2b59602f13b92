"""What each rank process of `distributed.ranks` starts with: torchrun's variables and its slot's.

Each rank process imports this module for its target: the runner's modules are imported in the
test only, so a rank starts without torch.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from runner.config import RunSpec

SEEN = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "SLOT")


def environment_seen(spec: RunSpec, output_dir: Path, rank: int) -> dict[str, str | None]:
    """Stands in for measuring, in the rank's own process: what that process was started with."""
    return {name: os.environ.get(name) for name in SEEN}


def test_each_rank_starts_with_torchruns_variables_and_its_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.backends.base import Slot
    from runner.config_loading import load_run_spec
    from runner.execute import ranks
    from tests.helpers import compose_cfg

    monkeypatch.setattr(ranks, "measure_rank", environment_seen)
    spec = load_run_spec(compose_cfg("backend=cpu", "tracking=off", "+workload=rmsnorm_naive", "distributed.ranks=2"))
    seen = ranks.run_ranks(spec, tmp_path, [Slot("a", (("SLOT", "a"),)), Slot("b", (("SLOT", "b"),))])
    run_id = seen[0]["TORCHELASTIC_RUN_ID"]
    assert run_id and seen == [
        {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
         "TORCHELASTIC_RUN_ID": run_id, "SLOT": "a"},
        {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0",
         "TORCHELASTIC_RUN_ID": run_id, "SLOT": "b"},
    ]  # fmt: skip
