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


def quantiles(n: int) -> np.ndarray:
    """n evenly spaced quantiles of the standard normal: a sample without the luck of a draw."""
    return np.asarray(stats.norm.ppf((np.arange(n) + 0.5) / n))


def steady(n: int = 300) -> list[float]:
    """Step times around 1 ms with a 1% spread."""
    return list(1 + 0.01 * quantiles(n))


def spread_to(cv: float, n: int = 300) -> list[float]:
    """Step times of one cluster (normal on log times), scaled to exactly this cv: no mode, no far-out step."""
    times = np.exp(0.25 * quantiles(n))
    return list(1 + cv * (times - times.mean()) / times.std(ddof=1))


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
    samples = spread_to(cv)
    assert statistics.stdev(samples) / statistics.fmean(samples) == pytest.approx(cv)
    assert instability_reasons([1.0, 1.0, 1.0], samples) == reasons


def two_clusters(low: np.ndarray, high: np.ndarray) -> list[float]:
    """The step times of two clusters of log times."""
    return list(np.exp(np.concatenate([low, high])))


def sides_ratio(samples: list[float]) -> float:
    """The median of the steps over 1 ms over that of the steps under: Otsu's split of a series symmetric about 1 ms."""
    times = np.asarray(samples)
    return float(np.median(times[times > 1]) / np.median(times[times < 1]))


# 150 steps of a cluster, normal on log times with sd 0.25; 1% for the tight ones
WIDE, TIGHT = 0.25 * quantiles(150), 0.01 * quantiles(150)
# two wide clusters 2.2 sd apart, Ashman's D 2.2: Otsu's sides score 3.01
APART = two_clusters(WIDE - 0.275, WIDE + 0.275)


@pytest.mark.parametrize(
    ("samples", "modes"),
    [
        # Otsu's sides 1.40x apart, but one cluster: they score 2.67
        pytest.param(two_clusters(WIDE, WIDE), None, id="one-cluster-D-2.67"),
        # Ashman's D 1.6, too near to show two peaks: 2.80
        pytest.param(two_clusters(WIDE - 0.2, WIDE + 0.2), None, id="two-clusters-D-2.80"),
        pytest.param(APART, (0.5, sides_ratio(APART)), id="two-clusters-D-3.01"),
        # cleanly apart, but nearer than the 1.3x a mode must be slower by
        pytest.param(two_clusters(TIGHT, TIGHT + np.log(1.25)), None, id="two-clusters-1.25x"),
        pytest.param(two_clusters(TIGHT, TIGHT + np.log(1.35)), (0.5, 1.35), id="two-clusters-1.35x"),
    ],
)
def test_two_modes_need_clusters_that_show_two_peaks_1_3x_apart(
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
