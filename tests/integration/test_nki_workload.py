"""The NKI workload: run at the Neuron runtime's LNC on the NKI stand-in, and refused where NKI is missing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from runner import names
from runner.backends.cores import LNC_ENV
from runner.backends.cpu import CpuBackend
from runner.config import BackendConfig
from runner.config_loading import load_run_spec
from runner.measure.build import build_workload
from tests.helpers import RunnerInProcess, all_runs, compose_cfg

# three 128-row tiles: an odd count, which LNC 2's two programs cannot halve
ODD_TILES = ("+workload=nki_rmsnorm", "workload.batch=3", "workload.hidden=64", "workload.eps=0.5")


def test_at_lnc_2_a_run_launches_the_kernel_at_the_runtimes_lnc_and_matches_the_reference(
    tmp_path: Path, tracking_uri: str, runner_in_process: RunnerInProcess, nki_standin: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv(LNC_ENV, "2")  # Trn2's default: a launch at LNC 1 (a plain kernel(...)) fails at it
    done = runner_in_process(f"hydra.run.dir={tmp_path}", *ODD_TILES, "backend=cpu", "measure=quick")
    assert done.returncode == 0, done.stderr
    (run,) = all_runs(tracking_uri)
    assert run.data.tags[names.TAG_ACCURACY] == "pass", run.data.tags[names.TAG_ACCURACY_DETAIL]


@pytest.mark.parametrize(("lnc", "tiles_stored"), [(1, [[0, 1, 2]]), (2, [[0], [1, 2]])])
def test_the_lncs_programs_split_the_rows_between_them(
    nki_standin: None, monkeypatch: pytest.MonkeyPatch, lnc: int, tiles_stored: list[list[int]]
) -> None:
    monkeypatch.setenv(LNC_ENV, str(lnc))
    import nki.language as nl

    stored: list[list[int]] = [[] for _ in range(lnc)]  # the tiles each program stores, by first row / 128
    store = nl.store

    def recorded(dst: torch.Tensor, value: nl.Tile) -> None:
        stored[nl.program_id(0)].append(dst.storage_offset() // dst.stride(0) // nl.tile_size.pmax)
        store(dst, value)

    monkeypatch.setattr(nl, "store", recorded)
    built = build_workload(load_run_spec(compose_cfg(*ODD_TILES)).workload, CpuBackend(BackendConfig(name="cpu")))
    with torch.no_grad():
        output, reference = built.module(*built.inputs), built.eager.reference(*built.inputs)
    assert stored == tiles_stored
    torch.testing.assert_close(output.double(), reference, rtol=1e-5, atol=1e-6)  # NaN where no program stored


def test_without_nki_the_workload_is_refused_as_backend_neuron_is(
    tmp_path: Path, tracking_uri: str, runner_in_process: RunnerInProcess
) -> None:
    nki = runner_in_process(f"hydra.run.dir={tmp_path}/nki", "+workload=nki_rmsnorm", "backend=cpu")
    neuron = runner_in_process(f"hydra.run.dir={tmp_path}/neuron", "+workload=rmsnorm_naive", "backend=neuron")
    assert neuron.stderr.startswith("error: backend=neuron needs torch-neuronx")  # this host has neither
    assert nki.returncode == neuron.returncode != 0
    assert nki.stderr.splitlines() == [
        "error: workload._target_=workloads.nki_rmsnorm.NkiRMSNorm needs NKI: neither nki nor neuronxcc.nki is "
        "installed here (it comes with torch-neuronx and neuronx-cc on a Trainium host)"
    ]
    assert not (tmp_path / "nki").exists() and all_runs(tracking_uri) == []
