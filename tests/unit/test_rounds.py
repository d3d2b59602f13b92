"""The rounds' order: every job once per round it has a worker in, in an order drawn afresh each round."""

from __future__ import annotations

import random
from collections import Counter

from runner.execute.rounds import round_orders


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
