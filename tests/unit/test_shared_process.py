"""Jobs sharing one process: what the device runtime reads once per process, and when a sweep isolates its jobs."""

from __future__ import annotations

from typing import Any

import pytest
from omegaconf import OmegaConf

from runner.backends.cpu import CpuBackend
from runner.backends.neuron import NeuronBackend
from runner.config import ConfigError
from runner.job import SharedProcess, own_process_keys


def neuron_job(**backend: Any) -> dict[str, Any]:
    return {"backend": {"name": "neuron", "cores": None, "async_runtime": None, **backend},
            "measure": {"copies": None, "compile_cache": None}, "distributed": {"ranks": 1}}  # fmt: skip


def ran(process: SharedProcess, config: dict[str, Any], name: str = "first") -> None:
    with process.job(config["backend"]["name"], config, name):
        pass


def test_a_later_job_may_not_change_what_the_runtime_read_once() -> None:
    process = SharedProcess()
    ran(process, neuron_job(cores="0", async_runtime=True), "cores 0")
    ran(process, neuron_job(cores="0", async_runtime=True), "again")  # the same settings share the process
    with pytest.raises(ConfigError) as refused:
        ran(process, neuron_job(cores="1", async_runtime=True))
    assert str(refused.value) == (
        "backend.cores=1: this process ran 'cores 0' with backend.cores=0 already and the Neuron runtime reads "
        "NEURON_RT_VISIBLE_CORES once and holds those NeuronCores: run the sweep with hydra/launcher=isolated "
        "(a fresh process per job)"
    )
    with pytest.raises(ConfigError, match=r"^backend.async_runtime=False: .* TORCH_NEURONX_ENABLE_ASYNC_NRT once"):
        ran(process, neuron_job(cores="0", async_runtime=False))


def test_copies_ranks_and_compile_caches_need_a_process_of_their_own() -> None:
    process = SharedProcess()
    ran(process, neuron_job(), "plain")
    for key, value in (("measure.copies", 2), ("distributed.ranks", 2), ("measure.compile_cache", "cold")):
        group, name = key.split(".")
        config = neuron_job()
        config[group][name] = value
        with pytest.raises(ConfigError, match=rf"^{key}={value} needs a process no job has measured in .* 'plain'"):
            ran(process, config)
    fresh = SharedProcess()
    ran(fresh, {**neuron_job(), "measure": {"copies": 2, "compile_cache": None}})  # the first job may


def test_a_device_keeps_its_own_settings() -> None:
    process = SharedProcess()
    ran(process, {"backend": {"name": "cpu", "cores": None}, "measure": {}}, "on the cpu")
    ran(process, neuron_job(cores="3"), "on core 3")  # the CPU job started no Neuron runtime
    with pytest.raises(ConfigError, match="backend.cores=4: this process ran 'on core 3' with backend.cores=3"):
        ran(process, neuron_job(cores="4"))


def test_a_job_that_failed_still_fixed_the_process() -> None:
    process = SharedProcess()
    with pytest.raises(RuntimeError), process.job("neuron", neuron_job(cores="0"), "crashed"):
        raise RuntimeError("after the runtime started")
    with pytest.raises(ConfigError, match="backend.cores=1: this process ran 'crashed'"):
        ran(process, neuron_job(cores="1"))


def test_a_sweep_needs_own_processes_for_the_keys_its_backend_reads_once() -> None:
    fixed = OmegaConf.create(neuron_job())
    assert own_process_keys([NeuronBackend], ["backend.async_runtime"], fixed) == ["backend.async_runtime"]
    assert own_process_keys([NeuronBackend], ["measure.copies"], fixed) == ["measure.copies"]
    assert own_process_keys([NeuronBackend], ["workload.hidden"], fixed) == []
    assert own_process_keys([CpuBackend], ["backend.async_runtime", "measure.copies"], fixed) == []
    # copies set for every job of a sweep over something else: the second job's copies find the cores held
    copies = OmegaConf.create({**neuron_job(), "measure": {"copies": 2, "compile_cache": None}})
    assert own_process_keys([NeuronBackend], ["workload.hidden"], copies) == ["measure.copies"]
    assert own_process_keys([NeuronBackend], [], copies) == []  # one job has its process to itself
    cold = OmegaConf.create({"measure": {"compile_cache": "cold"}})
    assert own_process_keys([CpuBackend], ["workload.hidden"], cold) == ["measure.compile_cache"]
