"""measure.memory_snapshot on the CPU, end to end: two runs in a real SQLite store, then `compare --memory`."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import mlflow
import pytest
import torch.cuda._memory_viz as memory_viz
from omegaconf import OmegaConf

from runner import compare, names
from runner.config_loading import load_run_spec
from runner.experiment import run_experiment
from runner.measure.memory import PROFILER_SOURCE
from runner.report.memory_diff import sites_of
from runner.report.reader import logged_table
from tests.helpers import RunnerInProcess, all_runs, compose_cfg, job_for

TINY = ("+workload=rmsnorm_naive", "workload.seq_len=4", "workload.batch=2", "measure=quick", "backend=cpu")


def run_job(tmp_path: Path, name: str, *overrides: str) -> dict[str, float]:
    cfg = compose_cfg(*TINY, *overrides)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    return run_experiment(load_run_spec(cfg), job_for(tmp_path / name, name), resolved)


def test_two_cpu_runs_peaks_and_which_sites_account_for_the_difference(
    tmp_path: Path, tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    small = run_job(tmp_path, "small", "workload.hidden=16", "measure.memory_snapshot=true")
    large = run_job(tmp_path, "large", "workload.hidden=256", "measure.memory_snapshot=true")
    assert 0 < small[names.MEMORY_WINDOW_PEAK_MB] < large[names.MEMORY_WINDOW_PEAK_MB]
    printed = capsys.readouterr().out
    assert f"from {PROFILER_SOURCE}; largest site aten::" in printed and "https://pytorch.org/memory_viz" in printed

    client = mlflow.MlflowClient(tracking_uri)
    runs = {run.info.run_name: run for run in all_runs(tracking_uri)}
    peaks = {}
    for name, run in runs.items():
        assert run.data.tags[names.TAG_MEMORY_SOURCE] == PROFILER_SOURCE
        table = logged_table(client, run, names.MEMORY_SITES_FILE)
        assert table is not None
        sites = sites_of(table)
        # the sites live at the peak add up to it
        assert sum(sites.values()) / 2**20 == pytest.approx(run.data.metrics[names.MEMORY_WINDOW_PEAK_MB])
        assert all(site.startswith("aten::") for site in sites)
        peaks[name] = sum(sites.values())
        snapshot_file = f"{names.MEMORY_FOLDER}/{names.MEMORY_SNAPSHOT_FILE}"
        local = Path(client.download_artifacts(run.info.run_id, snapshot_file, str(tmp_path / name)))
        with local.open("rb") as f:
            assert "TOTAL MEM" in memory_viz.trace(pickle.load(f))  # the artifact memory_viz opens

    before, after = runs["small"].info.run_id, runs["large"].info.run_id
    assert compare.main(["--memory", before[:8], after, "--uri", tracking_uri]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0] == "memory peak by allocation site: small -> large"
    assert lines[2].split() == ["site", "before", "after", "change", "share", "of", "change"]
    assert lines[3].startswith("aten::mul ")  # the naive RMSNorm's largest buffers: x * rsqrt(...) * weight
    assert f"total: peak {peaks['small'] / 1024:.2f} KiB -> {peaks['large'] / 1024:.2f} KiB (+" in out

    assert compare.main(["--memory", before, after, "--uri", tracking_uri, "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["change_bytes"] == peaks["large"] - peaks["small"]
    assert sum(site["change"] for site in document["sites"]) == document["change_bytes"]
    changes = [abs(site["change"]) for site in document["sites"]]
    assert changes == sorted(changes, reverse=True)

    assert compare.main(["--memory", before, after, "--uri", tracking_uri, "--format", "csv"]) == 0
    rows = capsys.readouterr().out.splitlines()  # the rows alone: no heading, no total
    assert rows[0] == "site,before,after,change,share of change" and rows[1].startswith("aten::mul,")


def test_compare_memory_refuses_a_run_without_a_snapshot(
    tmp_path: Path, tracking_uri: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_job(tmp_path, "plain", "workload.hidden=16", "profiler=none")
    (run,) = all_runs(tracking_uri)
    assert names.MEMORY_WINDOW_PEAK_MB not in run.data.metrics  # the key's default costs nothing
    with pytest.raises(SystemExit, match=rf"^error: --memory {run.info.run_id}: the run has no memory_sites.json"):
        compare.main(["--memory", run.info.run_id, run.info.run_id, "--uri", tracking_uri])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        pytest.param(
            "profiler=none",
            "measure.memory_snapshot=true: backend=cpu keeps no allocation history, so it reads the profiler's "
            "memory events, which are off here; set profiler.enabled=true and profiler.profile_memory=true, "
            "or measure.memory_snapshot=false",
            id="neither_source",
        ),
        pytest.param("measure.memory_snapshot=maybe", "measure.memory_snapshot", id="not_a_bool"),
    ],
)
def test_bad_memory_snapshot_input_is_one_line_naming_the_key(
    runner_in_process: RunnerInProcess, tmp_path: Path, override: str, message: str
) -> None:
    overrides = [*TINY, "measure.memory_snapshot=true", override, f"hydra.run.dir={tmp_path}"]
    done = runner_in_process(*overrides)
    assert done.returncode != 0
    assert message in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not all_runs()
