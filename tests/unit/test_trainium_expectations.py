"""What a Trainium engineer expects of a study and a workload, composed as a job would compose them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from runner import names
from runner.backends import neuron
from runner.backends.cores import LNC_ENV
from runner.backends.cpu import CpuBackend
from runner.backends.neuron_capture import EVENT_SOURCES, add_system_metrics
from runner.config import BackendConfig, ConfigError
from runner.config_loading import load_run_spec
from runner.measure.build import build_workload
from tests.helpers import STANDIN, compose_cfg


@pytest.mark.parametrize(
    ("backend", "dtype"), [("neuron", "bfloat16"), ("cpu", "float32"), ("cuda", "float32"), ("auto", "float32")]
)
def test_the_rmsnorm_study_computes_in_bfloat16_on_neuron_only(backend: str, dtype: str) -> None:
    for variant in ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled"):  # each job of the sweep
        cfg = compose_cfg("+experiment=rmsnorm_comparison", f"backend={backend}", f"workload={variant}")
        assert load_run_spec(cfg).workload.dtype == dtype, variant


def test_auto_counts_as_neuron_where_torch_neuronx_is_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(STANDIN))  # found, never imported: it would rename PrivateUse1 here
    assert load_run_spec(compose_cfg("+experiment=rmsnorm_comparison")).workload.dtype == "bfloat16"


def test_a_dtype_on_the_command_line_wins_over_the_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = compose_cfg("+experiment=rmsnorm_comparison", "backend=neuron", "workload.dtype=float32")
    assert load_run_spec(cfg).workload.dtype == "float32"


def built_nki_rmsnorm(*overrides: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The NKI workload's output and its float64 reference, as a CPU job builds it."""
    spec = load_run_spec(compose_cfg("+workload=nki_rmsnorm", *overrides)).workload
    built = build_workload(spec, CpuBackend(BackendConfig(name="cpu")))
    with torch.no_grad():
        return built.module(*built.inputs), built.eager.reference(*built.inputs)


def test_the_nki_kernel_matches_the_rmsnorm_reference_tile_by_tile(nki_standin: None) -> None:
    # three 128-row tiles; an eps large enough that dropping it shows
    output, reference = built_nki_rmsnorm("workload.batch=3", "workload.eps=0.5")
    assert output.shape == reference.shape == (3, 128, 512)
    torch.testing.assert_close(output.double(), reference, rtol=1e-5, atol=1e-6)


def test_the_nki_workload_refuses_rows_that_fill_no_whole_tile(nki_standin: None) -> None:
    with pytest.raises(ConfigError, match=r"^workload.seq_len: batch \* seq_len must be a multiple of 128$"):
        built_nki_rmsnorm("workload.seq_len=100")


def test_the_nki_workload_without_nki_is_refused_naming_both_packages() -> None:
    needs = r"^workload._target_=workloads.nki_rmsnorm.NkiRMSNorm needs NKI: neither nki nor neuronxcc.nki is installed"
    with pytest.raises(ConfigError, match=needs):
        built_nki_rmsnorm()


def test_the_nki_workload_where_the_runtimes_lnc_is_unknown_is_refused_naming_the_variable(
    nki_standin: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "product_name").write_text("trn3.48xlarge\n")  # the docs give Trn3 no default LNC
    monkeypatch.setattr(neuron, "DMI_PRODUCT", tmp_path / "product_name")
    monkeypatch.delenv(LNC_ENV, raising=False)
    unknown = (
        "workload: an NKI kernel launches at the Neuron runtime's LNC, unknown: NEURON_LOGICAL_NC_CONFIG is unset "
        "and the Neuron docs give no trn3 default; set NEURON_LOGICAL_NC_CONFIG, one of: 1, 2"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(unknown)}$"):
        built_nki_rmsnorm()


def test_system_profile_sessions_add_up_and_keep_the_highest_hbm_peak() -> None:
    events, peak = names.NEURON_SYSTEM_EVENTS.format(source=EVENT_SOURCES[0]), names.NEURON_SYSTEM_HBM_PEAK_BYTES
    total: dict[str, float] = {}
    add_system_metrics(total, {events: 2.0, peak: 5.0})
    add_system_metrics(total, {events: 3.0, peak: 4.0})
    assert total == {events: 5.0, peak: 5.0}
