"""The rounds' order (every job once per round it has a worker in, drawn afresh each round) and where they are left."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from runner import names
from runner.execute.rounds import round_orders
from runner.files import write_whole
from runner.measure.loop import HungWorkload, RoundPlace, SteadyState, save_hung
from runner.sweep.rounds import time_sweep_rounds


def test_each_round_holds_every_job_once_in_a_fresh_random_order() -> None:
    orders = round_orders([20, 20, 20], random.Random(7))
    assert len(orders) == 20 and all(sorted(order) == [0, 1, 2] for order in orders)
    # drawn afresh: the rounds do not all start with the same job, and more than one order occurs
    assert len({tuple(order) for order in orders}) > 1
    assert len(Counter(order[0] for order in orders)) == 3


def test_a_job_with_fewer_workers_leaves_the_later_rounds_to_the_others() -> None:
    orders = round_orders([1, 3], random.Random(0))
    assert [sorted(order) for order in orders] == [[0, 1], [1], [1]]


def test_the_order_comes_from_the_generator_it_is_given() -> None:
    assert round_orders([5, 5, 5], random.Random(3)) == round_orders([5, 5, 5], random.Random(3))
    assert round_orders([], random.Random(0)) == []


def test_a_job_reads_the_steady_state_its_sweeps_rounds_saved_for_it(tmp_path: Path) -> None:
    timed = SteadyState([[[1.0, 2.0]], [[3.0]]], places=[RoundPlace(1, 2, 2), RoundPlace(2, 1, 2)], rounds_id="s1")
    timed.save(tmp_path / "key.json")
    assert SteadyState.load(tmp_path / "key.json") == timed
    assert SteadyState.load(tmp_path / "other.json") is None  # a job the rounds did not time times its own


def test_a_sweep_clears_the_rounds_an_earlier_sweep_left_in_its_folder(tmp_path: Path) -> None:
    stale = tmp_path / names.ROUNDS_FOLDER / "key.json"
    SteadyState([[[1.0]]], rounds_id="earlier").save(stale)
    # fewer than two jobs take part: no rounds now, and none of the earlier sweep's are read
    time_sweep_rounds(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}), [], "now")
    assert not stale.exists()


def test_a_file_another_process_reads_is_written_whole_as_text_or_bytes(tmp_path: Path) -> None:
    # a Slurm task's pickled result and a sweep's rounds go through the same rename
    write_whole(tmp_path / "a" / "result.pkl", b"\x80\x05result")
    write_whole(tmp_path / "a" / "rounds.json", "{}")
    assert (tmp_path / "a" / "result.pkl").read_bytes() == b"\x80\x05result"
    assert sorted(path.name for path in (tmp_path / "a").iterdir()) == ["result.pkl", "rounds.json"]  # no draft left


def test_a_job_its_sweeps_rounds_found_hung_fails_with_why_instead_of_timing_it_again(tmp_path: Path) -> None:
    why = "its workload hung: round 2 gave no answer within 30 s (hydra.launcher.timeout_s)"
    save_hung(tmp_path / "key.json", why)
    with pytest.raises(HungWorkload) as hung:
        SteadyState.load(tmp_path / "key.json")
    assert str(hung.value) == why
