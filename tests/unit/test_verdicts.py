"""Each threshold behind a verdict, pinned from both sides: a series just inside it and one just outside.

The gate's margin and its one-sided test (both modes), and the stability verdict's one bound:
how uncertain a run's median is. Series are built, not drawn, so each lands where the test says.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from scipy import stats

from runner import gate
from runner.execute import against
from runner.measure.stability import (
    BLOCKS,
    Spread,
    between_runs,
    block_medians,
    noise_note,
    within_run,
    worker_spread,
)
from runner.measure.stats import TimeRatio, paired_time_ratio, t_quantile, time_ratio
from runner.report.gate_verdicts import judged, measured, summary


def quantiles(n: int) -> np.ndarray:
    """n evenly spaced quantiles of the standard normal: a sample without the luck of a draw."""
    return np.asarray(stats.norm.ppf((np.arange(n) + 0.5) / n))


def processes(*block_medians: list[float], steps_per_block: int = 10) -> list[list[list[float]]]:
    """One repeat per process, its steps in `BLOCKS` blocks whose steps all take that block's median."""
    return [[[ms for median in medians for ms in [median] * steps_per_block]] for medians in block_medians]


def alternating(interval: float, count: int = 3 * BLOCKS) -> list[float]:
    """Block medians alternately above and below 1 ms, their log sd set so the next run's interval is exactly this."""
    sd = np.log1p(interval) / (stats.t.ppf(0.975, count - 1) * np.sqrt(2)) * np.sqrt(count)
    half = sd * np.sqrt((count - 1) / count)  # +-half has this sample sd (ddof=1) over an even count
    return list(np.exp(half * np.resize([1.0, -1.0], count)))


def spread_of(step_ms: list[list[list[float]]]) -> Spread:
    return within_run(step_ms, [float(np.median([ms for repeat in p for ms in repeat])) for p in step_ms])


@pytest.mark.parametrize(
    ("interval", "noted"),
    [
        pytest.param(0.049, None, id="4.9%-inside"),
        pytest.param(0.051, "the next identical run may land +-5.1% from this one (from its blocks; over 5%)",
                     id="5.1%-outside"),
    ],
)  # fmt: skip
def test_a_run_whose_next_run_may_land_more_than_5_percent_away_gets_the_noisy_host_note(
    interval: float, noted: str | None
) -> None:
    """The interval is t(0.975, df) * sqrt(2) standard errors: a second run has an error of its own."""
    medians = alternating(interval)
    step_ms = processes(medians[:BLOCKS], medians[BLOCKS : 2 * BLOCKS], medians[2 * BLOCKS :])
    spread = spread_of(step_ms)
    assert spread.next_run == pytest.approx(interval)
    note = noise_note(spread, "more worker processes (measure.processes=5)")
    assert note is None if noted is None else noted in str(note) and "paired by round" in str(note)


@pytest.mark.parametrize("df", [1, 2, 3, 5, 10, 30, 100])
def test_the_t_quantile_is_scipys(df: int) -> None:
    assert t_quantile(0.975, df) == pytest.approx(stats.t.ppf(0.975, df), rel=0.0015)


def test_blocks_are_the_stretches_the_loop_moves_memory_between() -> None:
    """30 steps in 8 blocks cut at i * 30 // 8, as `timed_steps` cuts its stretches; each repeat on its own."""
    cuts = [i * 30 // BLOCKS for i in range(BLOCKS + 1)]
    repeat = [float(block) for block in range(BLOCKS) for _ in range(cuts[block + 1] - cuts[block])]
    assert block_medians([[repeat, [5.0, 6.0, 7.0]]]) == [[*map(float, range(BLOCKS))], [5.0, 6.0, 7.0]]


def test_a_repeat_is_cut_into_8_blocks() -> None:
    """8 blocks a repeat, as docs/trust.md says: 80 steps give 8 medians of 10 steps each, not 4 of 20."""
    assert block_medians([[[float(step) for step in range(80)]]]) == [[4.5 + 10 * block for block in range(8)]]


@pytest.mark.parametrize(
    ("slowest", "stable"),
    [pytest.param(1.005, True, id="0.5%-apart"), pytest.param(1.3, False, id="30%-apart")],
)
def test_processes_that_disagree_make_the_median_uncertain(slowest: float, stable: bool) -> None:
    """Each process's blocks agree: only the processes' medians can widen the interval (t with 2 df)."""
    steady = [1.0 + 0.0001 * (block % 2) for block in range(BLOCKS)]
    spread = spread_of(processes(steady, steady, [ms * slowest for ms in steady]))
    assert spread.source == "its 3 worker processes"
    assert (noise_note(spread, "") is None) == stable


def test_a_slow_mode_that_comes_and_goes_widens_the_interval_and_a_tail_of_slow_steps_does_not() -> None:
    """Whole blocks 5x slower move the median; 7% of single steps 3x slower, spread over every block, do not."""
    mode = [5.0 if block % 3 == 0 else 1.0 for block in range(BLOCKS)]
    assert noise_note(spread_of(processes(mode, mode, mode)), "") is not None
    tail = [[[3.0 if step % 15 == 0 else 1.0 + 0.001 * (step % 7) for step in range(300)]] for _ in range(3)]
    assert noise_note(spread_of(tail), "") is None


def test_a_workers_spread_is_its_blocks_about_their_own_worker_and_not_the_workers_apart() -> None:
    """Blocks alternately 2% either side of their worker's mean: pooled over 3 workers (21 df), their log sd over
    sqrt(24) is the median's standard error, whether the workers read alike or 30% apart (a round's share)."""
    half = np.log(1.02)
    steady = list(np.exp(half * np.resize([1.0, -1.0], BLOCKS)))
    sd = half * np.sqrt(3 * BLOCKS / (3 * BLOCKS - 3))  # the deviations' sum of squares over their df
    half_width = np.expm1(stats.t.ppf(0.975, 3 * BLOCKS - 3) * sd / np.sqrt(3 * BLOCKS))
    for slowest in (1.0, 1.3):
        spread = worker_spread(processes(steady, steady, [ms * slowest for ms in steady]))
        assert spread == pytest.approx(half_width, rel=1e-3)


def test_the_host_drift_is_read_from_two_earlier_runs_of_the_configuration_and_the_newest_ten() -> None:
    """Three runs (two degrees of freedom) at least; an eleventh, older run far off is not read."""
    assert between_runs([1.0], 1.0) is None
    found = between_runs([1.01, 0.99], 1.0)
    assert found is not None and found.df == 2
    assert found.sd == pytest.approx(np.log([1.01, 0.99, 1.0]).std(ddof=1))
    newest = between_runs([1.0, 1.01] * 5 + [9.0], 1.0)
    assert newest is not None and newest.df == 10 and newest.sd < 0.01


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


def side_rounds(pair_ratios: list[float]) -> against.SideRounds:
    """Three rounds per server pair on a drifting host; in pair p the candidate takes `pair_ratios[p]` times as long."""
    timed = against.SideRounds(seed=0, servers=[pair for pair in range(1, len(pair_ratios) + 1) for _ in range(3)])
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


# -3% [-15%, +14%]: faster by the point estimate, but the interval reaches past a 5% margin, without significance
NOISY = TimeRatio(0.97, 0.85, 1.14, p_value=0.6, p_slower=0.8, detectable=0.2)
# +20% [+12%, +28%]: significantly slower than a 5% margin
SLOWER = TimeRatio(1.2, 1.12, 1.28, p_value=1e-4, p_slower=1e-3, detectable=0.03)


def test_faster_needs_the_whole_interval_below_1_not_the_estimate() -> None:
    """A -3% change whose interval reaches +14% may be a slowdown past the margin: "could not judge", not "faster"."""
    assert judged(NOISY, NOISY.p_slower, 0.05) == (
        "could not judge: its 95% interval reaches +14.0%, past the +5% margin"
    )
    clearly_faster = TimeRatio(0.9, 0.85, 0.95, p_value=1e-3, p_slower=1.0, detectable=0.03)
    assert judged(clearly_faster, clearly_faster.p_slower, 0.05) == "faster"


def test_caught_from_is_the_margin_plus_what_the_spread_hides() -> None:
    """A spread that hides 2.67% on top of a 5% margin: the gate catches 1.05 * 1.0267 - 1 = +7.8%, not +2.7%."""
    estimate = TimeRatio(1.0, 0.98, 1.02, p_value=1.0, p_slower=1.0, detectable=0.0267)
    row = measured([1.0, 1.0], [1.0, 1.0], estimate, estimate.p_slower, 0.05, "paired, 2 rounds", "one job")
    assert row["caught from"] == "+7.8%"
    assert summary([(estimate, estimate.p_slower)], 0, 5.0, "more rounds", 0).startswith(
        "smallest slowdown the gate catches 80% of the time here: +7.8%;"
    )


def test_a_regression_is_not_counted_among_the_jobs_not_judged() -> None:
    """A significant slowdown is judged, a regression, though its interval reaches past the margin too."""
    counts = summary([(SLOWER, SLOWER.p_slower), (NOISY, NOISY.p_slower)], 1, 5.0, "more rounds", 0).splitlines()[-1]
    assert counts == "gate: 1 regression(s) above +5% in 2 tested job(s), 1 of them not judged; 1 not tested"
    alone = summary([(SLOWER, SLOWER.p_slower)], 0, 5.0, "more rounds", 0).splitlines()[-1]
    assert alone == "gate: 1 regression(s) above +5% in 1 tested job(s); 0 not tested"
    checked = summary([(SLOWER, SLOWER.p_slower)], 0, 5.0, "more rounds", 1).splitlines()[-1]
    assert checked == alone + "; 1 failed a check besides time (the lines above)"
