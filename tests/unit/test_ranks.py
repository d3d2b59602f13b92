"""Each rank's torchrun variables: the same set torchrun gives its workers, with this rank's values."""

from __future__ import annotations

import inspect
import re

import pytest
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

from runner.execute.ranks import Rendezvous, torchrun_env

RENDEZVOUS = Rendezvous("10.0.0.1", 29500, "job-7")


def variables_torchrun_sets() -> set[str]:
    """The names torchrun's agent puts in a worker's environment, read from torch's own source."""
    start = inspect.getsource(LocalElasticAgent._start_workers)
    names = set(re.findall(r'"([A-Z_]+)": ', start))
    local = inspect.getsource(LocalElasticAgent._set_local_rank_env)
    # CUDA_VISIBLE_DEVICES only passes the parent's through (or, in virtual mode, pins a GPU)
    return (names | set(re.findall(r'worker_env\["([A-Z_]+)"\]', local))) - {"CUDA_VISIBLE_DEVICES"}


def test_a_rank_gets_every_variable_torchrun_sets() -> None:
    found = variables_torchrun_sets()
    assert {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RUN_ID"} <= found
    assert set(torchrun_env(RENDEZVOUS, 0, 2, local_rank=0, local_world=2, node=0)) == found


def test_a_rank_on_the_second_node_counts_itself_as_torchrun_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    env = torchrun_env(RENDEZVOUS, 5, 8, local_rank=1, local_world=4, node=1)
    assert env == {
        "RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
        "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_NAME": "default", "ROLE_RANK": "5", "ROLE_WORLD_SIZE": "8",
        "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "job-7",
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "False", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
    }  # fmt: skip


def test_the_users_nccl_error_handling_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")
    assert torchrun_env(RENDEZVOUS, 0, 1, local_rank=0, local_world=1, node=0)["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
