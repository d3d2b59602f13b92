"""Each threshold behind a verdict, pinned from both sides: a series just inside it and one just outside.

The gate's margin and its one-sided test (both modes), and the stability verdict's guards: the
spread between rounds, the two-modes separation and ratio, the step cv. Series are built from
quantiles, not random draws, so each lands where the test says.
"""

from __future__ import annotations

import json
import re
import statistics

import numpy as np
import pytest
from scipy import stats

from runner import gate
from runner.measure.stability import instability_reasons, two_modes
from runner.measure.stats import paired_time_ratio, time_ratio


def quantiles(n: int, distribution: stats.rv_continuous = stats.norm, **shape: float) -> np.ndarray:
    """n evenly spaced quantiles of a distribution centred on 0: a sample without the luck of a draw."""
    return np.asarray(distribution.ppf((np.arange(n) + 0.5) / n, **shape))


def steady(n: int = 300) -> list[float]:
    """Step times around 1 ms with a 1% spread."""
    return list(1 + 0.01 * quantiles(n))


def long_tailed(cv: float, n: int = 200) -> list[float]:
    """Step times with a long slow tail (log time Student t, 3 df), scaled to exactly this cv.

    Tails this long keep Otsu's halves overlapping (Ashman's D under 2) and leave fewer than 5%
    of steps far out, so the step cv is the only check such a series can fail.
    """
    tail = np.exp(0.2 * quantiles(n, stats.t, df=3))
    return list(1 + cv * (tail - tail.mean()) / tail.std(ddof=1))


@pytest.mark.parametrize(
    ("slowest", "reasons"),
    [
        pytest.param(1.09, [], id="9%-inside"),
        pytest.param(1.11, ["the 3 rounds' medians (one worker process each) differ by 11%"], id="11%-outside"),
    ],
)
def test_rounds_whose_medians_differ_by_more_than_10_percent_are_unstable(slowest: float, reasons: list[str]) -> None:
    assert instability_reasons([1.0, 1.0, slowest], steady()) == reasons


@pytest.mark.parametrize(
    ("cv", "reasons"),
    [pytest.param(0.24, [], id="0.24-inside"), pytest.param(0.26, ["step cv 0.26 (over 0.25)"], id="0.26-outside")],
)
def test_steps_with_a_cv_over_a_quarter_are_unstable(cv: float, reasons: list[str]) -> None:
    samples = long_tailed(cv)
    assert statistics.stdev(samples) / statistics.fmean(samples) == pytest.approx(cv)
    assert instability_reasons([1.0, 1.0, 1.0], samples) == reasons


def two_clusters(low: np.ndarray, high: np.ndarray) -> list[float]:
    """The step times of two clusters of log times, 150 steps each."""
    return list(np.exp(np.concatenate([low, high])))


def halves_ratio(samples: list[float]) -> float:
    """The median of the steps over 1 ms over that of the steps under: Otsu's split of a series symmetric about 1 ms."""
    times = np.asarray(samples)
    return float(np.median(times[times > 1]) / np.median(times[times < 1]))


T3 = 0.2 * quantiles(150, stats.t, df=3)
TIGHT = 0.01 * quantiles(150)
# the long-tailed clusters 1.27x apart: Ashman's D of Otsu's halves 2.11
APART = two_clusters(T3 - 0.12, T3 + 0.12)


@pytest.mark.parametrize(
    ("samples", "modes"),
    [
        # D 1.94, though the halves' medians are 1.36x apart: they overlap
        pytest.param(two_clusters(T3, T3), None, id="one-long-tailed-cluster-D-1.94"),
        pytest.param(APART, (0.5, halves_ratio(APART)), id="two-long-tailed-clusters-D-2.11"),
        # cleanly apart, but nearer than the 1.3x a mode must be slower by
        pytest.param(two_clusters(TIGHT, TIGHT + np.log(1.25)), None, id="two-clusters-1.25x"),
        pytest.param(two_clusters(TIGHT, TIGHT + np.log(1.35)), (0.5, 1.35), id="two-clusters-1.35x"),
    ],
)
def test_two_modes_need_clusters_separated_by_d_2_and_1_3x_apart(
    samples: list[float], modes: tuple[float, float] | None
) -> None:
    assert two_modes(samples) == (None if modes is None else pytest.approx(modes))


def one_sided_p(base: list[float], new: list[float], margin: float) -> float:
    """P of a t-test, by hand, that the mean log ratio of `new` over `base` exceeds log(1 + margin)."""
    log_ratios = np.log(new) - np.log(base)
    t = (log_ratios.mean() - np.log1p(margin)) / (log_ratios.std(ddof=1) / np.sqrt(len(log_ratios)))
    return float(stats.t.sf(t, len(log_ratios) - 1))


# five rounds of a host that drifts; both sides see it
DRIFT = [1.0, 1.3, 0.9, 1.1, 1.0]


@pytest.mark.parametrize(
    ("ratios", "margin", "slower"),
    [
        pytest.param([1.03, 1.04, 1.02, 1.035, 1.025], 0.0, True, id="3%-slower-no-margin"),
        pytest.param([1.03, 1.04, 1.02, 1.035, 1.025], 0.05, False, id="3%-slower-within-5%"),
        pytest.param([1.09, 1.10, 1.11, 1.10, 1.095], 0.05, True, id="10%-slower-past-5%"),
        pytest.param([0.89, 0.90, 0.91, 0.90, 0.905], 0.05, False, id="10%-faster"),
    ],
)
def test_the_paired_test_asks_one_sided_whether_the_ratio_exceeds_the_margin(
    ratios: list[float], margin: float, slower: bool
) -> None:
    new = [ms * ratio for ms, ratio in zip(DRIFT, ratios, strict=True)]
    estimate = paired_time_ratio(DRIFT, new, margin)
    assert estimate is not None
    assert estimate.p_slower == pytest.approx(one_sided_p(DRIFT, new, margin))
    assert (estimate.p_slower < 0.05) == slower


@pytest.mark.parametrize(
    ("margin", "p_slower"), [pytest.param(0.05, 1.0, id="within"), pytest.param(0.01, 0.0, id="past")]
)
def test_ratios_without_spread_are_judged_by_the_ratio_against_the_margin(margin: float, p_slower: float) -> None:
    """Every round (and every process) 3% slower: no spread to test with, so the ratio itself decides."""
    base, new = [1.0, 1.0, 1.0], [1.03, 1.03, 1.03]
    for compared in (paired_time_ratio, time_ratio):
        estimate = compared(base, new, margin)
        assert estimate is not None and estimate.p_slower == p_slower, compared.__name__


def side_rounds(pair_ratios: list[float]) -> gate.SideRounds:
    """Three rounds per server pair on a drifting host; in pair p the candidate takes `pair_ratios[p]` times as long."""
    timed = gate.SideRounds(seed=0, servers=[pair for pair in range(1, len(pair_ratios) + 1) for _ in range(3)])
    timed.ms["baseline"] = [1.0 + 0.1 * (number % 4) for number in range(len(timed.servers))]
    timed.ms["candidate"] = [
        ms * pair_ratios[pair - 1] for ms, pair in zip(timed.ms["baseline"], timed.servers, strict=True)
    ]
    return timed


@pytest.mark.parametrize(
    ("pair_ratios", "fail_above", "code", "verdict"),
    [
        pytest.param([1.028, 1.031, 1.029, 1.032], "5", 0, "ok", id="3%-slower-within-5%"),
        pytest.param([1.028, 1.031, 1.029, 1.032], "1", 1, "REGRESSION: slower by more than 1%", id="3%-past-1%"),
        pytest.param([1.098, 1.101, 1.099, 1.102], "5", 1, "REGRESSION: slower by more than 5%", id="10%-past-5%"),
        pytest.param([0.898, 0.901, 0.899, 0.902], "5", 0, "faster", id="10%-faster"),
        # the median pair within the margin, the interval reaching past it
        pytest.param([0.93, 1.10, 0.97, 1.04], "5", 0, r"could not judge: its 95% interval reaches \+\d+\.\d%, "
                     r"past the \+5% margin", id="too-noisy-to-tell"),
    ],
)  # fmt: skip
def test_the_against_gate_exits_1_only_on_a_significant_slowdown_past_the_margin(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    pair_ratios: list[float],
    fail_above: str,
    code: int,
    verdict: str,
) -> None:
    """`--against` judges the server pairs' ratios; the sides' measurement is the system tests' (test_gate_against)."""
    timed = side_rounds(pair_ratios)
    monkeypatch.setattr(gate, "measure_both", lambda rev, overrides, count, seed: ("0" * 40, timed))
    args = ["--against", "HEAD", "--fail-above", fail_above, "--rounds", str(len(timed.servers)), "--format", "json"]
    exit_code = gate.main(args)
    (row,) = json.loads(capsys.readouterr().out)
    assert exit_code == code and re.fullmatch(verdict, row["verdict"]), row
