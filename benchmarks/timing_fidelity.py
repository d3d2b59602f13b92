"""Timing fidelity: the runner's steady-state median against torch.utils.benchmark.

For each RMSNorm variant on the default shape, alternates the runner's timed phase and
`Timer(...).blocked_autorange()` on the same module and inputs, and prints the ratio of the
runner's median to the Timer's median. Target: 0.95 to 1.05.

python benchmarks/timing_fidelity.py [rounds]
"""

import statistics
import sys

import torch
from torch.utils.benchmark import Timer

from runner.backends.cpu import CpuBackend
from runner.compose import compose_config
from runner.config import load_run_spec
from runner.measure.build import build_workload
from runner.measure.phases import steady_state


def main(rounds: int) -> None:
    print(f"{'variant':18} {'runner ms':>10} {'Timer ms':>10} {'ratio':>7}  ratio per round")
    for variant in ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled"):
        # as many steps as Timer runs in its 0.5 s, so both see the same machine state
        spec = load_run_spec(
            compose_config(f"+workload={variant}", "backend=cpu", "tracking=off", "measure.steps=2000")
        )
        backend = CpuBackend(spec.backend)
        workload = build_workload(spec.workload, backend)
        # the very step the runner times: the module on its inputs, under no_grad
        timer = Timer(
            "step()",
            globals={"step": workload.step},
            num_threads=torch.get_num_threads(),  # Timer defaults to one thread; the runner uses them all
        )
        ratios, ours, theirs = [], [], []
        with torch.no_grad():
            workload.step()  # compile outside both measurements
            steady_state(workload, backend, spec), timer.blocked_autorange(min_run_time=0.5)  # settle the process
            for _ in range(rounds):
                ours.append(statistics.median(steady_state(workload, backend, spec)[0]))
                theirs.append(timer.blocked_autorange(min_run_time=0.5).median * 1000)
                ratios.append(ours[-1] / theirs[-1])
        ratio = statistics.median(ratios)
        per_round = " ".join(f"{r:.3f}" for r in ratios)
        ours_ms, theirs_ms = statistics.median(ours), statistics.median(theirs)
        print(f"{variant:18} {ours_ms:10.4f} {theirs_ms:10.4f} {ratio:7.3f}  {per_round}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
