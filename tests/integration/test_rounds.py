"""The rounds on real worker processes: a job whose worker fails is left out, the others keep every round."""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path

import pytest

from runner.backends.cpu import CpuBackend
from runner.config import BackendConfig
from runner.config_loading import load_run_spec
from runner.measure.loop import LAYOUTS_ENV, MOST_SETTLE_CALLS, SETTLE_CALLS, WARM_CALLS
from runner.sweep.rounds import RoundJob, time_rounds
from tests.helpers import compose_cfg

QUICK = ["backend=cpu", "tracking=off", "measure=quick", "measure.steps=5"]


def test_a_job_whose_worker_fails_is_left_out_and_the_others_keep_their_rounds() -> None:
    good = load_run_spec(compose_cfg(*QUICK, "+workload=rmsnorm_naive", "workload.hidden=8"))
    # passes its first call, then raises in the warm-up of its round 1 worker
    faulty = load_run_spec(compose_cfg(
        *QUICK, "+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "+workload.fault=raise",
        "workload.inputs=[[4]]",
    ))  # fmt: skip
    jobs = [RoundJob("good", "a", good, 2), RoundJob("faulty", "b", faulty, 2)]
    outcome = time_rounds(jobs, "sweep-1", rng=random.Random(0))
    assert list(outcome.steady) == ["a"] and not outcome.hung  # the faulty job times its own steady state
    steady = outcome.steady["a"]
    assert steady.rounds_id == "sweep-1" and len(steady.step_ms) == 2
    assert all(len(repeat) == 5 for process in steady.step_ms for repeat in process)
    # round 1 started both jobs' workers; round 2 only the one still taking part
    assert [(p.round, p.workers) for p in steady.places] == [(1, 2), (2, 1)]


def test_a_rounds_workers_take_turns_a_stretch_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = tmp_path / "calls.log"
    monkeypatch.setenv(LAYOUTS_ENV, "3")
    specs = {
        label: load_run_spec(
            compose_cfg(
                *QUICK,
                "+workload=custom",
                "workload._target_=tests.helpers.counting.RecordingModule",
                "workload.inputs=[[4]]",
                f"+workload.log_to={calls}",
                f"+workload.label={label}",
                "measure.steps=6",
            )
        )  # fmt: skip
        for label in ("a", "b")
    }
    time_rounds([RoundJob(label, label, spec, 1) for label, spec in specs.items()], "sweep-2", rng=random.Random(0))
    labels = calls.read_text().split()
    assert labels[:2] == ["a", "b"]  # the first-call workers, one after the other before the rounds
    runs = [(label, len(list(group))) for label, group in itertools.groupby(labels[2:])]
    first, second = runs[0][0], runs[1][0]
    assert [label for label, _ in runs] == [first, second] * 5
    # in turns: the first call, the warm-up's call and its warm calls, then 3 stretches of 2 steps, each after the
    # other's turn: settled first
    assert [count for _, count in runs[:4]] == [1, 1, 1 + WARM_CALLS, 1 + WARM_CALLS]
    assert all(SETTLE_CALLS + 2 <= count <= MOST_SETTLE_CALLS + 2 for _, count in runs[4:])


@pytest.mark.parametrize("where", ["in turns", "in slots"])
def test_a_hung_job_is_stopped_past_its_time_and_the_others_keep_their_rounds(where: str) -> None:
    good = load_run_spec(compose_cfg(*QUICK, "+workload=rmsnorm_naive", "workload.hidden=8"))
    # passes its first call, then never returns from its round 1 worker's warm-up
    hanging = load_run_spec(compose_cfg(
        *QUICK, "+workload=custom", "workload._target_=tests.helpers.faulty.Faulty", "+workload.fault=hang",
        "workload.inputs=[[4]]",
    ))  # fmt: skip
    slots = CpuBackend.plan_slots(BackendConfig(name="cpu"), 2, None, 1) if where == "in slots" else None
    jobs = [RoundJob("good", "a", good, 2), RoundJob("hanging", "b", hanging, 2)]
    started = time.monotonic()
    outcome = time_rounds(jobs, "sweep-3", slots, random.Random(0), timeout_s=5)
    assert time.monotonic() - started < 40
    assert outcome.hung == {"b": "its workload hung: round 1 gave no answer within 5 s (hydra.launcher.timeout_s)"}
    assert list(outcome.steady) == ["a"] and len(outcome.steady["a"].step_ms) == 2
