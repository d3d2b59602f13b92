"""What the terminal shows at the end of a job."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runner.optable import OpTable, self_time_by_op

TOP_OPS = 5


def job_summary(
    run_name: str, table: OpTable, metrics: dict[str, float], tags: dict[str, Any], trace_dir: Path, where: str
) -> str:
    """A short block: headline numbers, the top ops, where the trace and the run are."""
    m = metrics
    lines = [
        f"== {run_name} ==",
        f"steady state: median {m['time/step_median_ms']:.4f} ms/step (p10 {m['time/step_p10_ms']:.4f}, "
        f"p90 {m['time/step_p90_ms']:.4f}, cv {m['time/step_cv']:.2f}); first call {m['time/first_call_s']:.3f} s",
    ]
    if "profiler/overhead_pct" in m:
        lines.append(
            f"profiled step: {m['profiler/step_ms']:.4f} ms ({m['profiler/overhead_pct']:+.1f}% profiler overhead)"
        )
    if "accuracy.check" in tags:
        lines.append(f"accuracy: {tags['accuracy.check']} ({tags.get('accuracy.detail', '')})")
    if "roofline/achieved_gbps" in m:
        lines.append(
            f"roofline: {m['roofline/achieved_gbps']:.2f} GB/s = {m['roofline/bandwidth_fraction']:.1%} of "
            f"{m['roofline/peak_gbps']:.1f} GB/s; {m['roofline/achieved_gflops']:.2f} GFLOP/s "
            f"[{tags['roofline.peak']}]"
        )
    by_op = self_time_by_op(table)
    total = sum(by_op.values())
    if by_op:
        clock = "device" if table.has_device_time else "CPU"
        lines.append(f"top ops by self {clock} time over {table.active_steps} active step(s):")
        for name, ms in list(by_op.items())[:TOP_OPS]:
            share = ms / total if total else 0.0
            lines.append(f"  {ms:10.3f} ms  {share:6.1%}  {name}")
    traces = sorted(trace_dir.rglob("*.json")) if trace_dir.is_dir() else []
    if traces:
        lines.append(f"trace: {traces[-1]}  (open in https://ui.perfetto.dev or chrome://tracing)")
    lines.append(where)
    return "\n".join(lines)
