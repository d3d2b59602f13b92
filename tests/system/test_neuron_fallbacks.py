"""Ops that fell back to the CPU on Neuron, against the stand-in (NEURON_STANDIN_CPU_FALLBACK lists them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import names
from tests.helpers import all_runs
from tests.system.test_neuron_backend import run_neuron, the_run

pytestmark = pytest.mark.slow
# aten::pow runs in the built-in RMSNorm only (the naive one multiplies x by itself)
BOTH_RMSNORMS = ("+workload=rmsnorm_builtin,rmsnorm_naive",)


def test_each_job_counts_and_names_its_own_fallbacks_and_warns(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(tmp_path, "-m", "backend=neuron", workload=BOTH_RMSNORMS, NEURON_STANDIN_CPU_FALLBACK="aten::pow")
    assert done.returncode == 0, done.stderr
    jobs = {
        run.data.tags[names.TAG_WORKLOAD]: run.data
        for run in all_runs(tracking_uri)
        if run.data.tags.get(names.TAG_SWEEP) != "true"
    }
    builtin, naive = jobs["rmsnorm_builtin"], jobs["rmsnorm_naive"]
    assert builtin.metrics[names.NEURON_CPU_FALLBACK_OPS] == 1
    assert builtin.tags[names.TAG_NEURON_CPU_FALLBACKS] == "aten::pow"
    # run after it in the same process, the naive job does not inherit its fallbacks
    assert naive.metrics[names.NEURON_CPU_FALLBACK_OPS] == 0 and naive.tags[names.TAG_NEURON_CPU_FALLBACKS] == "none"
    assert done.stdout.count("fell back to the CPU") == 1
    assert "WARNING: 1 op(s) fell back to the CPU, each slower than on the NeuronCore: aten::pow" in done.stdout


def test_a_torch_neuronx_without_op_tracking_says_it_cannot_tell(tmp_path: Path, tracking_uri: str) -> None:
    done = run_neuron(
        tmp_path, "backend=neuron", NEURON_STANDIN_CPU_FALLBACK="aten::rsqrt", NEURON_STANDIN_DEVIATE="no_op_tracking"
    )
    assert done.returncode == 0, done.stderr
    data = the_run(tracking_uri).data
    assert data.tags[names.TAG_NEURON_CPU_FALLBACKS].startswith("unknown: this torch-neuronx has no get_fallback_ops()")
    assert names.NEURON_CPU_FALLBACK_OPS not in data.metrics and "fell back" not in done.stdout
