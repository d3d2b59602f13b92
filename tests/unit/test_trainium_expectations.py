"""What a Trainium engineer expects of a study and a workload, composed as a job would compose them."""

from __future__ import annotations

import pytest

from runner.config import load_run_spec
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
