"""The hand-written baseline: the same profile and MLflow logging as one runner job, no framework.

python benchmarks/minimal_profile.py sqlite:///bench.db out_dir [naive|builtin|compiled] [batch seq_len hidden]
"""

import sys
from pathlib import Path

import mlflow
import torch
from torch.profiler import ProfilerActivity, profile, schedule

from runner import names
from workloads.rmsnorm import BuiltinRMSNorm, NaiveRMSNorm

uri, out = sys.argv[1], Path(sys.argv[2])
variant = sys.argv[3] if len(sys.argv) > 3 else "naive"
batch, seq_len, hidden = (int(v) for v in sys.argv[4:7]) if len(sys.argv) > 4 else (4, 128, 512)
torch.manual_seed(0)
eager = (BuiltinRMSNorm if variant == "builtin" else NaiveRMSNorm)(hidden=hidden, batch=batch, seq_len=seq_len).eval()
(x,) = eager.example_inputs(torch.float32, torch.Generator().manual_seed(0))
module = torch.compile(eager) if variant == "compiled" else eager


def export(prof: profile) -> None:
    (out / "trace").mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(out / "trace" / "trace.json"))


mlflow.set_tracking_uri(uri)
if mlflow.get_experiment_by_name("runner") is None:  # as the runner does: artifacts not in ./mlruns of the checkout
    mlflow.create_experiment("runner", artifact_location=(out / "mlruns").resolve().as_uri())
mlflow.set_experiment("runner")
with mlflow.start_run(run_name="minimal"), torch.no_grad():
    mlflow.log_params({"variant": variant, "hidden": hidden, "batch": batch, "seq_len": seq_len})
    module(x)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=2, warmup=1, active=1),
        record_shapes=True,
        profile_memory=True,
        with_flops=True,
        on_trace_ready=export,
    ) as prof:
        for _ in range(4):
            module(x)
            prof.step()
    events = prof.key_averages(group_by_input_shape=True)
    mlflow.log_metric(names.CPU_SELF_TOTAL_MS, sum(e.self_cpu_time_total for e in events) / 1000)
    mlflow.log_table({"name": [e.key for e in events], "calls": [e.count for e in events]}, "key_averages.json")
    mlflow.log_text(events.table(sort_by="self_cpu_time_total"), "key_averages.txt")
    mlflow.log_artifacts(str(out / "trace"), "trace")
