"""How many untimed calls does a stretch need after its memory moved before its steps read as its layout's own?

Per variant and shape, in this process placed as the runner's first worker (one thread on its core, the
runner's malloc mode): warm up for `--warmup-s`, time the runner's warm call (the median of `WARM_CALLS`
calls, as the warm-up ends), then `--moves` times move the inputs to new memory (the runner's `MemoryLayouts`) and time
`--calls` calls. A layout's own time is the median of its calls from `--calls // 2` on. Reported per cell:
call k's time over its layout's (median over moves, the first `SHOWN_CALLS`); for N untimed calls, the
median of the next stretch's steps over the layout's (a stretch as long as a default worker's at that
shape: `measure.steps_s` of steps, at least 30 and 8 a layout, over 8 layouts), median over moves; the
spread of the layouts (sd of their log times); and the warm call over the median layout: the yardstick
`runner.measure.loop.settle` holds a cold stretch to is one layout's time.

python benchmarks/settle_calls.py [--moves M] [--calls C] [--warmup-s S] [--shape BxSxH ...]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from runner.backends.base import WHOLE_MACHINE
from runner.backends.cpu import CpuBackend
from runner.compose import compose_config
from runner.config_loading import load_run_spec
from runner.measure.build import build_workload
from runner.measure.host_memory import keep_freed_memory
from runner.measure.layouts import MemoryLayouts
from runner.measure.loop import WARM_CALLS, fewest_timed_steps, layout_stretch_ends

VARIANTS = ("rmsnorm_naive", "rmsnorm_builtin", "rmsnorm_compiled")
SHAPES = ("4x512x1024", "8x512x1024")
# untimed calls after a move, whose stretch's reading is reported
SETTLE_COUNTS = (2, 4, 6, 8, 12, 16)
SHOWN_CALLS = 12


def cell(variant: str, shape: str, moves: int, calls: int, warmup_s: float) -> None:
    batch, seq_len, hidden = shape.split("x")
    spec = load_run_spec(
        compose_config(
            f"+workload={variant}", "backend=cpu", "tracking=off",
            f"workload.batch={batch}", f"workload.seq_len={seq_len}", f"workload.hidden={hidden}",
        )
    )  # fmt: skip
    CpuBackend.worker_placement(spec.backend, 1, WHOLE_MACHINE).take()  # before torch's threads start
    backend = CpuBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    layouts = MemoryLayouts(workload.inputs)
    with torch.no_grad():
        workload.step()  # the first call, which compiles the compiled variant
        layouts.move()
        until = time.perf_counter() + warmup_s
        while time.perf_counter() < until:
            workload.step()
        warm_ms = statistics.median(backend.time_steps(workload.step, WARM_CALLS, False))
        series = []
        for _ in range(moves):
            layouts.move()
            series.append(backend.time_steps(workload.step, calls, False))
    own = [statistics.median(times[calls // 2 :]) for times in series]
    layout, moved = statistics.median(own), list(zip(series, own, strict=True))
    assert spec.measure.steps_s is not None  # the default measure fills a time
    steps = max(fewest_timed_steps(backend), math.ceil(spec.measure.steps_s * 1000 / layout))
    stretch = layout_stretch_ends(min(steps, spec.measure.steps), CpuBackend.traits.default_layouts)[0]
    by_call = [statistics.median(times[k] / ms for times, ms in moved) for k in range(SHOWN_CALLS)]
    after = {
        count: statistics.median(statistics.median(times[count : count + stretch]) / ms for times, ms in moved)
        for count in SETTLE_COUNTS
        if count + stretch <= calls // 2
    }
    spread = statistics.stdev(math.log(ms) for ms in own)
    print(f"{variant} {shape}: layouts' median {layout:.3f} ms, their sd of log time {spread:.3f}, "
          f"the warm call over it {warm_ms / layout:.3f}")  # fmt: skip
    print(f"  call k over its layout's time: {' '.join(f'{ratio:.2f}' for ratio in by_call)}")
    said = ", ".join(f"N={count} {ratio:.3f}" for count, ratio in after.items()) or f"none fit in --calls {calls}"
    print(f"  a {stretch}-step stretch after N untimed calls over its layout's time: {said}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--moves", type=int, default=30, help="moves of memory per cell (default 30)")
    parser.add_argument("--calls", type=int, default=80, help="calls timed after each move (default 80)")
    parser.add_argument("--warmup-s", type=float, default=1.0, help="seconds of warm-up (default 1)")
    parser.add_argument("--shape", action="append", metavar="BxSxH", help="these shapes instead (repeatable)")
    args = parser.parse_args()
    keep_freed_memory()  # the runner's workers' malloc mode
    for shape in args.shape or SHAPES:
        for variant in VARIANTS:
            cell(variant, shape, args.moves, args.calls, args.warmup_s)


if __name__ == "__main__":
    main()
