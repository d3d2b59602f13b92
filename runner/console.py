"""What the terminal shows at the end of a job."""

from __future__ import annotations

from pathlib import Path

from runner.optable import OpTable, self_time_by_op

TOP_OPS = 5


def job_summary(run_name: str, table: OpTable, metrics: dict[str, float], trace_dir: Path, where: str) -> str:
    """A short block: headline numbers, the top ops, where the trace and the run are."""
    lines = [f"== {run_name} =="]
    if "time/profiled_step_ms" in metrics:
        lines.append(f"profiled step: {metrics['time/profiled_step_ms']:.3f} ms")
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
