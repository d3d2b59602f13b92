"""Profiler overhead per RMSNorm variant: profiled step time against the unprofiled median.

Runs each variant with the reference schedule (1 active step) and with 20 active steps,
whose median is steadier, and prints profiler/overhead_pct for both.

python benchmarks/profiler_overhead.py
"""

from pathlib import Path
from tempfile import TemporaryDirectory

from runner import names
from runner.backends.cpu import CpuBackend
from runner.compose import compose_config
from runner.config import load_run_spec
from runner.execute.in_process import steady_state_source
from runner.measure.build import build_workload
from runner.measure.phases import measure


def overhead(variant: str, *overrides: str) -> tuple[float, float]:
    spec = load_run_spec(compose_config(f"+workload={variant}", "backend=cpu", "tracking=off", *overrides))
    backend = CpuBackend(spec.backend)
    with TemporaryDirectory() as out:
        workload = build_workload(spec.workload, backend)
        metrics = measure(workload, backend, spec, Path(out), steady_state_source(spec, backend, workload)).metrics()
    return metrics[names.STEP_MEDIAN_MS], metrics[names.PROFILER_OVERHEAD_PCT]


def main() -> None:
    print(f"{'variant':18} {'median ms':>10} {'overhead, 1 active':>19} {'overhead, 20 active':>20}")
    for variant in ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled"):
        median, one = overhead(variant)
        _, twenty = overhead(variant, "schedule.active=20")
        print(f"{variant:18} {median:10.4f} {one:18.1f}% {twenty:19.1f}%")


if __name__ == "__main__":
    main()
