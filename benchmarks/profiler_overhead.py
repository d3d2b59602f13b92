"""Profiler overhead per RMSNorm variant: profiled step time against the unprofiled median, and the profiler's own cost.

Runs each variant with the reference schedule (1 active step) and with 20 active steps,
whose median is steadier, and prints profiler/overhead_pct and profiler/cost_ms for both.

python benchmarks/profiler_overhead.py [--variant V ...] [--set KEY=VALUE ...]
"""

import argparse
from pathlib import Path
from tempfile import TemporaryDirectory

from runner import names
from runner.backends.cpu import CpuBackend
from runner.compose import compose_config
from runner.config_loading import load_run_spec
from runner.execute.in_process import steady_state_source
from runner.measure.build import build_workload
from runner.measure.phases import measure
from runner.measure.result import profiled_window_report


def overhead(variant: str, *overrides: str) -> tuple[float, float, float]:
    spec = load_run_spec(compose_config(f"+workload={variant}", "backend=cpu", "tracking=off", *overrides))
    backend = CpuBackend(spec.backend)
    with TemporaryDirectory() as out:
        workload = build_workload(spec.workload, backend)
        source = steady_state_source(spec, backend, workload)
        result = measure(workload, backend, spec, Path(out), source, Path(out) / names.MEMORY_FOLDER)
    metrics = result.metrics()
    cost, _ = profiled_window_report(spec, result, metrics[names.STEP_MEDIAN_MS])
    return metrics[names.STEP_MEDIAN_MS], metrics[names.PROFILER_OVERHEAD_PCT], cost[names.PROFILER_COST_MS]


VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")


def main(variants: list[str], extra: list[str]) -> None:
    one_active, twenty_active = (
        f"{'1 active: overhead':>19} {'cost ms':>8}",
        f"{'20 active: overhead':>20} {'cost ms':>8}",
    )
    print(f"{'variant':18} {'median ms':>10} {one_active} {twenty_active}")
    for variant in variants:
        median, one, one_cost = overhead(variant, *extra)
        _, twenty, twenty_cost = overhead(variant, *extra, "schedule.active=20")
        print(f"{variant:18} {median:10.4f} {one:18.1f}% {one_cost:8.4f} {twenty:19.1f}% {twenty_cost:8.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", action="append", choices=VARIANTS, help="only these variants (default: all)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a runner override")
    args = parser.parse_args()
    main(args.variant or list(VARIANTS), args.set)
