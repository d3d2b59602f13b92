"""The GPU check: what a CUDA machine must show before its numbers are trusted, in one command.

1. `pytest -m gpu`: the CUDA tests.
2. The README's three-variant sweep on the device under each launcher (inprocess, isolated,
   parallel), with the backend's worker processes and with `measure.processes=0`, and a compiled
   CPU job on the same host: every job and sweep must end FINISHED. On an H200 the sweep had
   failed every job: its workers were forked from a server whose compiler import had asked CUDA
   for its devices.
3. Per variant at 8x512x1024, the runner's step time (CUDA events around steps launched back to
   back) and its synchronized step beside `torch.utils.benchmark.Timer` and CUDA events around
   each synchronized call, each reference timed in a fresh process, as ratios; and the speedup
   naive/built-in the sweep printed over Timer's.

Targets (issue 48): the runner's step within 0.90-1.10 of Timer's for each variant, its printed
speedup within 10% of Timer's, and at most 8 minutes on one H200. The store and the job folders
go to a temporary folder, printed first. Without network, bring the runner's dependencies as
wheels first (docs/benchmarks.md, "The GPU check").

`--device cpu` runs the same checks on the CPU (no CUDA tests, no CUDA events), as the test
suite does at a small shape.

python benchmarks/gpu_check.py [--device cuda|cpu] [--shape BxSxH] [--launchers L ...] [--processes P ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mlflow import MlflowClient
from timing_fidelity import new_store  # benchmarks/timing_fidelity.py, beside this script

from runner import names
from runner.config import TrackingConfig

REPO = Path(__file__).resolve().parents[1]
VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")
LAUNCHERS = ("inprocess", "isolated", "parallel")
# measure.processes: the backend's worker processes, and the job's own process
PROCESSES = ("null", "0")
TARGET = (0.90, 1.10)
SPEEDUP_TOLERANCE = 0.10
# each reference's measuring time, in its fresh process
REFERENCE_S = 1.0
PRINTED_SPEEDUP = re.compile(r"^(\d+(?:\.\d+)?)x ")


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shape_overrides(shape: str) -> list[str]:
    batch, seq_len, hidden = shape.split("x")
    return [f"workload.batch={batch}", f"workload.seq_len={seq_len}", f"workload.hidden={hidden}"]


def run_command(what: str, cmd: list[str], env: dict[str, str]) -> bool:
    """Run one command of the check; say how long it took and whether it passed, with its output's tail if not."""
    start = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    passed = done.returncode == 0
    progress(f"{what}: {'ok' if passed else f'FAILED (exit {done.returncode})'} [{time.perf_counter() - start:.0f} s]")
    if not passed:
        progress((done.stdout + done.stderr)[-3000:])
    return passed


def reference_child(device: str, overrides: list[str]) -> None:
    """In a fresh process: build the workload as the runner does, print Timer's and per-call events' medians in ms."""
    import torch
    from torch.utils.benchmark import Timer

    from runner.backends.base import WHOLE_MACHINE
    from runner.backends.registry import backend_class
    from runner.compose import compose_config
    from runner.config_loading import load_run_spec
    from runner.measure.build import build_workload

    spec = load_run_spec(compose_config(*overrides, f"backend={device}", "tracking=off"))
    backend_type = backend_class(spec.backend.name)
    placement = backend_type.worker_placement(spec.backend, 1, WHOLE_MACHINE)  # as the runner's first worker
    if placement is not None:
        placement.take()
    backend = backend_type(spec.backend)
    workload = build_workload(spec.workload, backend)
    with torch.no_grad():
        for _ in range(1 + spec.measure.warmup):  # the first call (compilation) and the runner's warm-up
            workload.step()
        backend.synchronize()
        # Timer synchronizes CUDA around each block of calls: the device's throughput, launches included
        timer = Timer("step()", globals={"step": workload.step}, num_threads=torch.get_num_threads())
        timer_ms = timer.blocked_autorange(min_run_time=REFERENCE_S).median * 1000
        events_ms = None
        if device == "cuda":
            samples, end = [], time.perf_counter() + REFERENCE_S
            while time.perf_counter() < end:
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                start.record()
                workload.step()
                stop.record()
                torch.cuda.synchronize()
                samples.append(start.elapsed_time(stop))
            events_ms = statistics.median(samples)
    print(json.dumps({"timer_ms": timer_ms, "events_ms": events_ms}))


def reference(device: str, overrides: list[str]) -> dict[str, float | None]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", device, *overrides]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"reference process exited {done.returncode}: {' '.join(cmd)}\n{done.stderr[-3000:]}")
    answer: dict[str, float | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


def ratio(value: float | None, reference_ms: float | None) -> str:
    return "-" if value is None or not reference_ms else f"{value / reference_ms:.2f}"


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def timing_table(client: MlflowClient, sweep_dir: Path, device: str, shape: list[str]) -> list[str]:
    """The runner's numbers beside the references', per variant, and the speedups; the failed targets."""
    experiment = client.get_experiment_by_name(TrackingConfig.experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], f"tags.`{names.TAG_OUTPUT_DIR}` LIKE '{sweep_dir}%'")
    by_variant = {run.data.tags.get(names.TAG_WORKLOAD): run for run in runs}
    print(f"\nper variant, ms per step ({' '.join(shape)}, backend={device}):")
    header = "variant | Timer | events per call | runner (clock) | runner/Timer | synchronized | device busy"
    print(header + "\n" + "-" * len(header))
    failed, timer = [], {}
    for variant in VARIANTS:
        run = by_variant.get(variant)
        if run is None:
            failed.append(f"{variant}: no run of the timing sweep")
            continue
        refs = reference(device, [f"+workload={variant}", *shape])
        timer[variant] = refs["timer_ms"]
        m = run.data.metrics
        step, clock = m.get(names.STEP_MEDIAN_MS), run.data.tags.get(names.TAG_STEP_CLOCK, "-")
        print(
            f"{variant} | {ms(refs['timer_ms'])} | {ms(refs['events_ms'])} | {ms(step)} ({clock}) | "
            f"{ratio(step, refs['timer_ms'])} | {ms(m.get(names.SYNC_STEP_MS))} | {ms(m.get(names.DEVICE_BUSY_MS))}"
        )
        if step is None or not TARGET[0] <= step / (refs["timer_ms"] or float("nan")) <= TARGET[1]:
            failed.append(f"{variant}: runner/Timer {ratio(step, refs['timer_ms'])} is outside {TARGET[0]}-{TARGET[1]}")
    built_in = by_variant.get("rmsnorm_builtin")
    if built_in is not None and {"rmsnorm_naive", "rmsnorm_builtin"} <= timer.keys():
        timer_speedup = (timer["rmsnorm_naive"] or 0) / (timer["rmsnorm_builtin"] or float("nan"))
        printed = built_in.data.tags.get(names.TAG_COMPARE_SPEEDUP, "")
        print(f"\nspeedup naive/built-in: Timer {timer_speedup:.2f}x; the sweep printed {printed or '-'}")
        if (found := PRINTED_SPEEDUP.match(printed)) is None:
            failed.append(f"speedup naive/built-in: the sweep printed no speedup ({printed or 'nothing'})")
        elif abs(float(found.group(1)) / timer_speedup - 1) > SPEEDUP_TOLERANCE:
            failed.append(f"speedup naive/built-in: {found.group(1)}x printed, Timer {timer_speedup:.2f}x")
    return failed


def unfinished_runs(client: MlflowClient) -> list[str]:
    """Every run in the store that did not end FINISHED: the sweeps' parents, their jobs, the single runs."""
    experiment = client.get_experiment_by_name(TrackingConfig.experiment)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    return [f"{run.info.run_name}: {run.info.status}" for run in runs if run.info.status != "FINISHED"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--device", choices=("cuda", "cpu"), default="cuda", help="the device the sweeps run on (default: cuda)")
    add("--shape", default="8x512x1024", help="batch x seq_len x hidden (default: 8x512x1024)")
    add("--launchers", nargs="+", choices=LAUNCHERS, default=list(LAUNCHERS), help="the launchers to sweep under")
    add("--processes", nargs="+", choices=PROCESSES, default=list(PROCESSES), help="measure.processes to sweep with")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        reference_child(argv[1], argv[2:])
        return 0
    args = parse_args(argv)
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            print("benchmarks/gpu_check.py: no CUDA device is visible here (--device cpu checks the CPU)")
            return 2
    work = Path(tempfile.mkdtemp(prefix="gpu_check-"))
    uri = new_store(work)
    # the wheels' folder a machine without network installed into stays on the path (docs/benchmarks.md)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    progress(f"store and job folders in {work}")
    start, failed = time.perf_counter(), []
    if args.device == "cuda" and not run_command("pytest -m gpu", [sys.executable, "-m", "pytest", "-m", "gpu"], env):
        failed.append("pytest -m gpu")
    env["MLFLOW_TRACKING_URI"] = uri  # the runner's jobs log here; each test has a store of its own
    shape = shape_overrides(args.shape)
    sweep = [sys.executable, "-m", "runner", "-m", "+experiment=rmsnorm_comparison", f"backend={args.device}", *shape]
    timed = work / "sweep-timed"
    for launcher in args.launchers:
        for processes in args.processes:
            # the first sweep is timed as a user's (the default measure); the others must only finish
            is_timed = not timed.exists()
            folder = timed if is_timed else work / f"sweep-{launcher}-processes-{processes}"
            measure = [] if is_timed else ["measure=quick"]
            cmd = [*sweep, *measure, f"measure.processes={processes}", f"hydra/launcher={launcher}"]
            if not run_command(
                f"sweep, launcher {launcher}, measure.processes={processes}", [*cmd, f"hydra.sweep.dir={folder}"], env
            ):
                failed.append(f"sweep under {launcher} with measure.processes={processes}")
    if args.device == "cuda":
        # in worker processes forked from the server, as the H200's failed
        cpu_job = [sys.executable, "-m", "runner", "+workload=rmsnorm_compiled", "backend=cpu", "measure=quick",
                   "measure.processes=null"]  # fmt: skip
        if not run_command("a compiled CPU job on this GPU host", [*cpu_job, f"hydra.run.dir={work / 'cpu'}"], env):
            failed.append("a compiled CPU job on this GPU host")
    client = MlflowClient(uri)
    failed += [f"not FINISHED: {run}" for run in unfinished_runs(client)]
    if timed.exists():
        failed += timing_table(client, timed, args.device, shape)
    print(f"\nGPU check: {'passed' if not failed else 'FAILED'} in {time.perf_counter() - start:.0f} s")
    for failure in failed:
        print(f"  {failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
