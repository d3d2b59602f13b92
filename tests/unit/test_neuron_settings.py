"""The Neuron settings the docs name: the logical NeuronCore setting, both compile caches, the tools' folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runner import names
from runner.backends import neuron_tools
from runner.backends.cores import LNC_ENV, logical_nc_config
from runner.backends.neuron import NeuronBackend
from runner.backends.neuron_cache import COMPILE_CACHE_URL_ENV
from runner.backends.peaks import CHIP_TO_CHIP, INTRA_CHIP, datasheet_peak, link_between
from runner.backends.registry import COMPILE_CACHES
from runner.config import ConfigError, MonitorConfig, NeuronBackendConfig
from runner.config_loading import load_run_spec
from runner.execute.monitor import plan_monitor
from runner.measure.compile_cache import use_compile_cache
from tests.helpers import STANDIN, compose_cfg


@pytest.mark.parametrize(("lnc", "logical_cores"), [("1", 8), ("2", 4), (None, 4)])
def test_a_trn2_core_follows_the_lnc(lnc: str | None, logical_cores: int, monkeypatch: pytest.MonkeyPatch) -> None:
    if lnc is None:
        monkeypatch.delenv(LNC_ENV, raising=False)  # Trn2's documented default is 2
    else:
        monkeypatch.setenv(LNC_ENV, lnc)
    chip, core = datasheet_peak("trn2_chip", 1, "bfloat16"), datasheet_peak("trn2_core", 1, "bfloat16")
    assert core.gflops * logical_cores == pytest.approx(chip.gflops)
    assert core.bandwidth_gbps * logical_cores == pytest.approx(chip.bandwidth_gbps)
    assert core.cores_per_chip == logical_cores and f"{logical_cores} logical cores per chip" in core.source
    fp8 = datasheet_peak("trn2_core", 1, "float8")  # FP8 is shared out like every other figure
    assert fp8.gflops * logical_cores == pytest.approx(datasheet_peak("trn2_chip", 1, "float8").gflops)


@pytest.mark.parametrize("lnc", ["1", "2"])
def test_a_trn1_core_is_half_its_chip_whatever_the_lnc(lnc: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """LNC "applies only to Trn2 and Trn3": at NEURON_LOGICAL_NC_CONFIG=2 a Trn1 chip still has 2 logical cores."""
    monkeypatch.setenv(LNC_ENV, lnc)
    chip, core = datasheet_peak("trn1_chip", 1, "bfloat16"), datasheet_peak("trn1_core", 1, "bfloat16")
    assert core.cores_per_chip == 2 and core.gflops * 2 == pytest.approx(chip.gflops)
    assert core.bandwidth_gbps * 2 == pytest.approx(chip.bandwidth_gbps)
    assert logical_nc_config("trn1") == (1, f"1, the documented trn1 default ({LNC_ENV} does not apply)")


def test_ranks_on_one_chip_at_lnc_1_cross_no_link(monkeypatch: pytest.MonkeyPatch) -> None:
    one_chip = list(range(8))  # Trn2's 8 physical cores, each its own logical core at LNC=1
    monkeypatch.setenv(LNC_ENV, "1")
    assert link_between(one_chip, datasheet_peak("trn2_core", 1, "bfloat16").cores_per_chip, 1) == INTRA_CHIP
    monkeypatch.setenv(LNC_ENV, "2")  # the same 8 logical cores are 2 chips' worth
    assert link_between(one_chip, datasheet_peak("trn2_core", 1, "bfloat16").cores_per_chip, 1) == CHIP_TO_CHIP


def test_an_lnc_the_runtime_does_not_take_is_refused_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LNC_ENV, "4")
    with pytest.raises(ConfigError, match=f"^{LNC_ENV}='4' is not allowed; choose one of: 1, 2$"):
        datasheet_peak("trn2_core", 1, "bfloat16")


def backend_on(instance: str | None, monkeypatch: pytest.MonkeyPatch) -> NeuronBackend:
    monkeypatch.setattr("runner.backends.neuron.instance_type", lambda: instance)
    backend = NeuronBackend.__new__(NeuronBackend)  # no torch-neuronx in this process: skip __init__
    backend.config, backend.cores, backend.runtime_settings = NeuronBackendConfig(cores="0"), [0], {}
    return backend


def test_trn2_is_the_default_trn1_stays_and_trn3_needs_the_lnc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LNC_ENV, raising=False)
    assert backend_on(None, monkeypatch).peak("bfloat16") == datasheet_peak("trn2_core", 1, "bfloat16")
    assert backend_on("trn1.32xlarge", monkeypatch).peak("bfloat16") == datasheet_peak("trn1_core", 1, "bfloat16")
    assert backend_on("trn3.48xlarge", monkeypatch).peak("bfloat16") is None  # the docs give no Trn3 default
    monkeypatch.setenv(LNC_ENV, "1")
    assert backend_on("trn3.48xlarge", monkeypatch).peak("bfloat16") == datasheet_peak("trn3_core", 1, "bfloat16")


def test_the_manifest_says_which_lnc_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LNC_ENV, "1")
    assert backend_on("trn2.48xlarge", monkeypatch).manifest()[names.MANIFEST_NEURON_LNC] == f"1, from {LNC_ENV}"
    monkeypatch.delenv(LNC_ENV)
    default = backend_on("trn2.48xlarge", monkeypatch).manifest()[names.MANIFEST_NEURON_LNC]
    assert default == "2, the documented trn2 default"


def cold_job(root: Path) -> None:
    use_compile_cache(load_run_spec(compose_cfg(
        "+workload=rmsnorm_compiled", "measure.compile_cache=cold", f"measure.compile_cache_dir={root}"
    )))  # fmt: skip


def test_a_cache_job_moves_the_hlo_keyed_cache_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (variable for cache in COMPILE_CACHES for variable in cache.folders.values()):
        monkeypatch.setenv(variable, "/the/users/own")  # restored after the test: use_compile_cache sets them
    cold_job(tmp_path / "cache")
    assert Path(os.environ[COMPILE_CACHE_URL_ENV]).parent == tmp_path / "cache"


@pytest.mark.parametrize(
    ("variable", "value", "named"),
    [
        ("NEURON_CC_FLAGS", "--model-type=transformer --cache_dir=/home/me/cache", "NEURON_CC_FLAGS has --cache_dir"),
        ("NEURON_CC_FLAGS", "--no_cache", "NEURON_CC_FLAGS has --no_cache"),
        ("TORCH_NEURONX_NEFF_DISABLE_CACHE", "1", "TORCH_NEURONX_NEFF_DISABLE_CACHE is set"),
    ],
)
def test_a_cache_job_refuses_settings_that_bypass_its_folders(
    variable: str, value: str, named: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigError, match=f"^measure.compile_cache=cold: {named}, so compilations would bypass"):
        cold_job(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # refused before any folder is made


def test_a_tool_off_path_is_found_where_the_tools_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    installed, on_path = tmp_path / "opt", tmp_path / "path"
    for folder in (installed, on_path):
        folder.mkdir()
        (folder / "neuron-ls").write_text("#!/bin/sh\n")
        (folder / "neuron-ls").chmod(0o755)
    monkeypatch.setattr(neuron_tools, "NEURON_BIN", installed)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert neuron_tools.neuron_tool("neuron-ls") == str(installed / "neuron-ls")
    monkeypatch.setenv("PATH", str(on_path))  # the user's PATH comes first
    assert neuron_tools.neuron_tool("neuron-ls") == "neuron-ls"
    assert neuron_tools.neuron_tool("neuron-top") is None


def test_the_monitor_is_found_where_the_tools_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(neuron_tools, "NEURON_BIN", STANDIN / "bin")  # the stand-in's neuron-monitor
    monkeypatch.setenv("PATH", str(tmp_path))
    plan = plan_monitor(MonitorConfig(period_s=1), NeuronBackend)
    assert plan is not None and plan.source == "neuron-monitor" and not plan.missing
