"""Studies over sweeps: shape curves with significant crossovers, and core scaling of side-by-side copies."""

from __future__ import annotations

import os
from pathlib import Path

import mlflow
import pytest
from mlflow.entities import Run

from runner import names
from runner.backends.neuron_cache import NeuronCompileCache
from runner.backends.registry import COMPILE_CACHES
from runner.config import ConfigError, RunSpec
from runner.config_loading import load_run_spec
from runner.measure.compile_cache import use_compile_cache
from runner.report.curves import Crossover, crossover_report, crossovers, faster, size_curves, too_few_sizes
from runner.report.scaling import contention_onset, scaling_curves, scaling_report
from tests.helpers import compose_cfg


def logged_run(
    client: mlflow.MlflowClient,
    experiment: str,
    workload: str,
    size: float,
    medians: list[float],
    stable: bool = True,
    rounds_id: str | None = None,
) -> Run:
    run = client.create_run(experiment, run_name=f"{workload} {size:g}")
    run_id = run.info.run_id
    if rounds_id is not None:
        client.set_tag(run_id, names.TAG_ROUNDS_ID, rounds_id)
    client.set_tag(run_id, names.TAG_WORKLOAD, workload)
    client.set_tag(run_id, names.TAG_TIMING_STABLE, str(stable).lower())
    client.set_tag(run_id, names.TAG_OVERRIDES, f"workload={workload} workload.size={size:g}")
    client.log_metric(run_id, names.ROOFLINE_BYTES, size)
    client.log_metric(run_id, names.STEP_MEDIAN_MS, sorted(medians)[len(medians) // 2])
    for step, value in enumerate(medians):
        client.log_metric(run_id, names.PROCESS_MEDIAN_MS, value, step=step)
    client.set_terminated(run_id)
    return client.get_run(run_id)


def test_a_crossover_is_claimed_only_between_significant_winners(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("shapes")
    fast, slow, tied = [1.00, 1.02, 0.98], [2.00, 2.04, 1.96], [1.01, 0.99, 1.03]
    runs = [
        # small: naive wins; 2 MB: a tie (no winner); 4 MB: compiled wins but its timing is unstable;
        # 8 MB: compiled wins. The one crossover lies between 1 MB and 8 MB.
        logged_run(client, experiment, "naive", 1e6, fast),
        logged_run(client, experiment, "compiled", 1e6, slow),
        logged_run(client, experiment, "naive", 2e6, fast),
        logged_run(client, experiment, "compiled", 2e6, tied),
        logged_run(client, experiment, "naive", 4e6, slow),
        logged_run(client, experiment, "compiled", 4e6, fast, stable=False),
        logged_run(client, experiment, "naive", 8e6, slow),
        logged_run(client, experiment, "compiled", 8e6, fast),
        logged_run(client, experiment, "builtin", 1e6, fast),  # one size only: no curve
    ]
    curves = size_curves(runs)
    assert list(curves) == ["compiled", "naive"]
    found = crossovers(client, curves)
    assert found == [Crossover(before="naive", after="compiled", bytes_low=1e6, bytes_high=8e6)]
    assert crossover_report(found, curves).splitlines()[1] == "- compiled overtakes naive between 1 MB and 8 MB moved"


def test_a_winner_at_one_size_is_found_round_by_round_where_the_runs_share_rounds(tracking_uri: str) -> None:
    """Rounds 2 and 4 three times slower for both variants: paired, compiled is 10% faster; unpaired, no winner."""
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("shapes")
    naive = [1.00, 3.03, 0.99, 2.97, 1.01]
    compiled = [m * r for m, r in zip(naive, [0.90, 0.91, 0.89, 0.90, 0.905], strict=True)]
    for rounds_ids, winner in [(("sweep-1", "sweep-1"), "compiled"), (("sweep-1", "sweep-2"), None)]:
        a = logged_run(client, experiment, "naive", 1e6, naive, rounds_id=rounds_ids[0])
        b = logged_run(client, experiment, "compiled", 1e6, compiled, rounds_id=rounds_ids[1])
        assert faster(client, a, b) == winner


def scaling_run(
    client: mlflow.MlflowClient, experiment: str, copies: int, per_copy_ms: float, stable: bool = True
) -> Run:
    run = client.create_run(experiment, run_name=f"copies {copies}")
    run_id = run.info.run_id
    client.set_tag(run_id, names.TAG_WORKLOAD, "rmsnorm_naive")
    client.set_tag(run_id, names.TAG_TIMING_STABLE, str(stable).lower())
    client.log_metric(run_id, names.STEP_MEDIAN_MS, per_copy_ms)
    client.log_metric(run_id, names.SCALING_COPIES, copies)
    client.log_metric(run_id, names.SCALING_THROUGHPUT, copies * 1000 / per_copy_ms)
    client.set_terminated(run_id)
    return client.get_run(run_id)


def test_contention_sets_in_where_a_copy_loses_its_best_rate(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("scaling")
    # two one-thread copies each beat one two-thread copy; at four they slow down
    runs = [scaling_run(client, experiment, k, ms) for k, ms in [(1, 0.08), (2, 0.04), (4, 0.06), (8, 0.12)]]
    (points,) = scaling_curves(runs).values()
    assert [p.copies for p in points] == [1, 2, 4, 8]
    assert [round(p.efficiency, 3) for p in points] == [1.0, 2.0, 1.333, 0.667]
    assert contention_onset(points) == 4
    report = scaling_report({"rmsnorm_naive": points})
    assert report.startswith("rmsnorm_naive: contention from 4 copies")
    # one rate throughout: a copy's share of the steps per second, not its median step beside the mean rate
    assert "| copies | steps/s (all copies) | steps/s per copy | efficiency |" in report
    assert "| 4 | 66666.7 | 16666.7 | 133% |" in report
    assert scaling_curves(runs[1:]) == {}  # no one-copy run: nothing to scale against


def test_a_failing_copy_fails_the_job_without_leaving_the_others_waiting() -> None:
    from runner.backends.base import Slot
    from runner.config_loading import load_run_spec
    from runner.execute.processes import ChildFailed
    from runner.execute.workers import steady_state_concurrently
    from tests.helpers import compose_cfg

    spec = load_run_spec(compose_cfg(
        "backend=cpu", "tracking=off", "measure=quick",
        "+workload=custom", "workload._target_=tests.helpers.faulty.Faulty",
        "+workload.fault=raise", "workload.inputs=[[4]]",
    ))  # fmt: skip
    with pytest.raises(ChildFailed, match="RuntimeError: injected failure"):
        steady_state_concurrently(spec, [Slot("a"), Slot("b")])


def cache_spec(state: str, folder: Path, *extra: str) -> RunSpec:
    return load_run_spec(compose_cfg(
        "+workload=rmsnorm_compiled", f"measure.compile_cache={state}", f"measure.compile_cache_dir={folder}", *extra
    ))  # fmt: skip


def test_a_cold_cache_must_be_fresh_and_a_warm_one_filled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (variable for cache in COMPILE_CACHES for variable in cache.folders.values()):
        monkeypatch.setenv(variable, "unchanged")  # restored after the test: use_compile_cache sets them
    with pytest.raises(ConfigError, match=r"measure.compile_cache=warm: measure.compile_cache_dir=.* is empty"):
        use_compile_cache(cache_spec("warm", tmp_path / "cache"))
    use_compile_cache(cache_spec("cold", tmp_path / "cache"))
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cache" / "inductor")
    with pytest.raises(ConfigError, match=r"measure.compile_cache=cold: .* already holds a cache; give a fresh"):
        use_compile_cache(cache_spec("cold", tmp_path / "cache"))
    with pytest.raises(ConfigError, match=r"measure.compile_cache \(cold or warm\) and measure.compile_cache_dir"):
        load_run_spec(compose_cfg("+workload=rmsnorm_compiled", "measure.compile_cache=cold"))


def test_neff_cache_hits_are_the_captured_neffs_the_cache_held_before(tmp_path: Path) -> None:
    session = tmp_path / "capture" / "i-0_pid_1" / "20261201_000000_000"
    session.mkdir(parents=True)
    for name in ("neff_11_vnc_0.neff", "neff_11_vnc_1.neff", "neff_22_vnc_0.neff", "neff_33.neff", "ntrace.pb"):
        (session / name).write_bytes(b"x")
    metrics, _ = NeuronCompileCache().lookups(tmp_path / "capture", neffs_new=1.0)  # three NEFFs ran, one was compiled
    assert metrics == {names.COMPILE_CACHE_HITS: 2.0, names.COMPILE_CACHE_MISSES: 1.0}
    metrics, counted = NeuronCompileCache().lookups(tmp_path / "no_device_capture", neffs_new=0.0)
    assert metrics == {names.COMPILE_CACHE_MISSES: 0.0} and "hits unknown: the capture holds no NEFF" in counted


def test_efficiency_from_unstable_timing_is_not_stated(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("unstable scaling")
    runs = [scaling_run(client, experiment, 1, 0.08), scaling_run(client, experiment, 4, 0.25, stable=False)]
    report = scaling_report(scaling_curves(runs))
    assert "| 4 | 16000.0 | 4000.0 | not stated: timing unstable |" in report and "32%" not in report
    assert "| 1 | 12500.0 | 12500.0 | 100% |" in report


def test_more_copies_than_cores_say_they_oversubscribe(capsys: pytest.CaptureFixture[str]) -> None:
    from runner.backends.cpu import CpuBackend

    backend = CpuBackend(load_run_spec(compose_cfg("backend=cpu", "tracking=off", "+workload=rmsnorm_naive")).backend)
    cpus = os.cpu_count() or 1
    backend.copy_slots(cpus)
    assert "oversubscribe" not in capsys.readouterr().err
    assert len(backend.copy_slots(cpus * 2)) == cpus * 2
    assert f"measure.copies={cpus * 2} on {cpus} CPU core(s): the copies oversubscribe" in capsys.readouterr().err


def test_a_shapes_study_says_why_it_has_no_curves_or_no_test(tracking_uri: str) -> None:
    client = mlflow.MlflowClient(tracking_uri)
    experiment = client.create_experiment("few sizes")
    fast, slow = [1.00, 1.02, 0.98], [2.00, 2.04, 1.96]
    two = [logged_run(client, experiment, name, size, fast) for name in ("naive", "compiled") for size in (1e6, 2e6)]
    assert size_curves(two) == {}
    assert "a variant needs 3 sizes or more, this sweep ran each at 2 at most" in (too_few_sizes(two) or "")
    assert too_few_sizes(two[:1]) is None  # one size: not a sweep over sizes
    three = [
        *two,
        logged_run(client, experiment, "naive", 4e6, slow),
        logged_run(client, experiment, "compiled", 4e6, fast),
    ]
    assert too_few_sizes(three) is None
    for run in three:  # one process each: the medians cannot be tested
        client.log_param(run.info.run_id, "measure.processes", "0")
    single = [client.get_run(run.info.run_id) for run in three]
    curves = size_curves(single)
    report = crossover_report(crossovers(client, curves), curves)
    assert "could not test (one sample per run with measure.processes=0" in report and "none significant" not in report
