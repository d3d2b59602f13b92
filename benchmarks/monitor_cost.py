"""What monitor.period_s costs a CPU job's step time: each monitor against none, interleaved, in one run.

One RMSNorm job (rmsnorm_naive's default shape, CPU, one thread, in this process) is timed in
rounds; each round times a block of steps under every arm in a fresh random order, each arm's
sampler started just before its block and stopped after it, its first `--settle-s` seconds of
steps untimed (its start):

- `none`: monitor.period_s off;
- `every_second`: the CPU backend's own monitor, the host sampler (a thread reading /proc);
- `neuron-monitor`: the stand-in's neuron-monitor (tests/helpers/neuron_standin/bin, on PATH)
  under the runner's reader process, with this process holding a stand-in NeuronCore, so every
  report carries its runtime with `--models` loaded models (a report of about 0.5 KB a model);
- `neuron-monitor parsed here`: the same reports read and parsed by a thread of this process, as
  the runner did before the reader (kept here only to measure what the reader saves);
- `mlflow log_system_metrics`: MLflow's own system metrics monitor (psutil, which the runner does
  not require: the arm is left out without it) every second, logging to a run in a temporary
  SQLite store as it samples, as `mlflow.start_run(log_system_metrics=True)` would.

Prints each arm's median and mean step time (the blocks' medians of each) and their ratios to
`none`, paired by round (median per-round ratio, 95% interval), each round's figures, and the
host's load average before and after: the figures hold for that load only.

python benchmarks/monitor_cost.py [ROUNDS] [--block-s S] [--settle-s S] [--models N]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

import torch
from mlflow import MlflowClient

from runner.backends import neuron_monitor
from runner.backends.cpu import CpuBackend
from runner.backends.monitor import MonitorPlan
from runner.backends.neuron import NeuronBackend
from runner.backends.neuron_monitor import NAME, neuron_values
from runner.compose import compose_config
from runner.config import MonitorConfig
from runner.config_loading import load_run_spec
from runner.execute.monitor import system_monitor
from runner.measure.build import BuiltWorkload, build_workload
from runner.measure.loop import timed_step
from runner.measure.stats import paired_time_ratio

STANDIN = Path(__file__).resolve().parents[1] / "tests" / "helpers" / "neuron_standin"
EVERY_SECOND = MonitorConfig(period_s=1)


class CpuWatchedByNeuronMonitor(CpuBackend):
    """The CPU backend with neuron-monitor as its system monitor: the Neuron sampler on a CPU job."""

    @classmethod
    def system_sampler(cls, period_s: int) -> MonitorPlan:
        """neuron-monitor, as the Neuron backend plans it where the tool is installed."""
        return NeuronBackend.system_sampler(period_s)


@contextmanager
def parsed_here(folder: Path) -> Iterator[None]:
    """neuron-monitor's reports read and parsed by a thread of this process (the runner's design before the reader)."""
    config = folder / "parsed_here.json"
    config.write_text(json.dumps(neuron_monitor.config(EVERY_SECOND.period_s or 1)))
    monitor = subprocess.Popen([NAME, "-c", str(config)], stdout=subprocess.PIPE, text=True)
    assert monitor.stdout is not None
    stdout = monitor.stdout
    reader = threading.Thread(target=lambda: [neuron_values(json.loads(line), os.getpid()) for line in stdout])
    reader.start()
    try:
        yield
    finally:
        monitor.terminate()
        reader.join()
        monitor.wait()
        stdout.close()


@contextmanager
def mlflow_system_metrics(run_id: str, tracking_uri: str) -> Iterator[None]:
    """MLflow's system metrics monitor on the run, every second, logging as it samples."""
    from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

    monitor = SystemMetricsMonitor(run_id, sampling_interval=1, tracking_uri=tracking_uri)
    monitor.start()
    try:
        yield
    finally:
        monitor.finish()


def arms(cpu: CpuBackend, watched: CpuBackend, folder: Path) -> dict[str, Callable[[], AbstractContextManager[object]]]:
    """Each arm: what starts its monitor (MLflow's only where psutil is installed)."""
    factories: dict[str, Callable[[], AbstractContextManager[object]]] = {
        "none": nullcontext,
        "every_second": lambda: system_monitor(EVERY_SECOND, cpu, folder / "host"),
        "neuron-monitor": lambda: system_monitor(EVERY_SECOND, watched, folder / "reader"),
        "neuron-monitor parsed here": lambda: parsed_here(folder),
    }
    if importlib.util.find_spec("psutil") is not None:
        uri = f"sqlite:///{folder / 'mlflow.db'}"
        run_id = MlflowClient(uri).create_run(MlflowClient(uri).create_experiment("monitor_cost")).info.run_id
        factories["mlflow log_system_metrics"] = lambda: mlflow_system_metrics(run_id, uri)
    return factories


def steps_ms(workload: BuiltWorkload, backend: CpuBackend, seconds: float) -> list[float]:
    """Step times (ms) for `seconds`."""
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        times.append(timed_step(workload, backend) * 1000)
    return times


def block_ms(
    workload: BuiltWorkload,
    backend: CpuBackend,
    monitor: AbstractContextManager[object],
    settle_s: float,
    block_s: float,
) -> tuple[float, float]:
    """The median and the mean step time (ms) of one block of steps under one monitor, after it settled.

    Steps run untimed for `settle_s` after the monitor starts, so its start (a process or two)
    is left out: what is timed is the steady state it watches. The median is the typical step;
    the mean also carries the few steps a monitor stalls (a report parsed once a period).
    """
    with monitor:
        steps_ms(workload, backend, settle_s)
        times = steps_ms(workload, backend, block_s)
    return statistics.median(times), statistics.fmean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=8)
    parser.add_argument("--block-s", type=float, default=3.0, help="seconds of timed steps per arm per round")
    parser.add_argument("--settle-s", type=float, default=1.5, help="seconds of untimed steps after a monitor starts")
    parser.add_argument("--models", type=int, default=2000, help="models each stand-in report lists")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="monitor_cost_"))
    state = folder / "nrt"
    state.mkdir()
    (state / "nc_0.owner").write_text(f"{os.getpid()}\n")  # this process is a Neuron application to the stand-in
    os.environ.update(
        PATH=f"{STANDIN / 'bin'}{os.pathsep}{os.environ['PATH']}",
        NEURON_STANDIN_STATE=str(state),
        NEURON_STANDIN_LOADED_MODELS=str(args.models),
    )
    torch.set_num_threads(1)  # as the runner's CPU workers run (backend.cpu_placement=one_core)
    spec = load_run_spec(compose_config("+workload=rmsnorm_naive", "backend=cpu", "tracking=off"))
    cpu, watched = CpuBackend(spec.backend), CpuWatchedByNeuronMonitor(spec.backend)
    workload = build_workload(spec.workload, cpu)
    steps_ms(workload, cpu, args.block_s)  # past the first calls
    load_before = os.getloadavg()
    factories = arms(cpu, watched, folder)
    blocks: dict[str, list[tuple[float, float]]] = {name: [] for name in factories}
    for _ in range(args.rounds):
        for name in random.sample(list(factories), len(factories)):
            blocks[name].append(block_ms(workload, cpu, factories[name](), args.settle_s, args.block_s))
    load_after = os.getloadavg()
    print(
        f"{args.rounds} rounds of {args.block_s:g} s per arm (after {args.settle_s:g} s untimed), period 1 s, "
        f"{args.models} loaded models per report"
    )
    print(f"load average (1, 5, 15 min) before {load_before}, after {load_after}")
    print(f"{'arm':28} {'median ms':>9} {'ratio to none [95%]':>23} {'mean ms':>9} {'ratio to none [95%]':>23}")
    for name, values in blocks.items():
        line = f"{name:28}"
        for stat in (0, 1):  # the blocks' medians, then their means
            ours, nones = [block[stat] for block in values], [block[stat] for block in blocks["none"]]
            ratio = paired_time_ratio(nones, ours) if name != "none" else None
            paired = f"{ratio.ratio:.3f} [{ratio.low:.3f}, {ratio.high:.3f}]" if ratio else ""
            line += f" {statistics.median(ours):9.4f} {paired:>23}"
        print(line)
    for name, values in blocks.items():
        print(f"{name:28} by round, median/mean ms: {' '.join(f'{a:.3f}/{b:.3f}' for a, b in values)}")


if __name__ == "__main__":
    main()
