"""The NKI workload where NKI is missing: refused as an unavailable backend is, before any run or folder."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import RunnerInProcess, all_runs


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
