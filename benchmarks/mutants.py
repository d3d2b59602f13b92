"""Does each verdict have a test that fails when it is broken? A table-driven mutation benchmark.

Each mutant in `MUTANTS` swaps one exact piece of code for a broken one (a margin dropped, a
one-sided test made two-sided, a threshold moved) and names the quick-layer tests meant to catch
it. For each, the project (runner, workloads, conf, hydra_plugins, tests, benchmarks,
pyproject.toml) is copied to a temporary folder, the old text is checked to occur exactly once
(else the mutant is stale: a refactor moved the code, and the mutant would test nothing), the
mutant applied, and its tests run there (the copy's packages shadow the editable install).
First the named tests run once on the unmutated copy: a test that fails anyway is left out, and
is not counted as a kill.

One row per mutant: its id, killed / SURVIVED / stale, seconds, and the test that failed (or
why it is stale). Exit 1 if any mutant survived or is stale. About 20 s a mutant on a 2-core host.

.venv/bin/python benchmarks/mutants.py [--only ID ...]

To add a mutant, append a `Mutant` to `MUTANTS`: the file, its exact old text (one place in the
file), the new text, the pytest node ids meant to kill it, and one line on what it breaks.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from git_copy import copy_project  # benchmarks/git_copy.py, beside this script

VERDICTS = "tests/unit/test_verdicts.py"
TRUST = "tests/unit/test_trust.py"
AGAINST_GATE = f"{VERDICTS}::test_the_against_gate_exits_1_only_on_a_significant_slowdown_past_the_margin"
PAIRED_TEST = f"{VERDICTS}::test_the_paired_test_asks_one_sided_whether_the_ratio_exceeds_the_margin"
UNCERTAIN = f"{VERDICTS}::test_a_run_whose_next_run_may_land_more_than_5_percent_away_gets_the_noisy_host_note"
HOST_DRIFT = f"{VERDICTS}::test_the_host_drift_is_read_from_two_earlier_runs_of_the_configuration_and_the_newest_ten"
HIGHER_IS_BETTER = 'HIGHER_IS_BETTER = ("_per_s", "gbps", "gflops", "_fraction")'
LAUNCHER = "tests/unit/test_process_launcher.py"
SECRETS = "tests/unit/test_secrets.py::test_credentials_are_masked"
PAIRED_ONE_SIDED = 'slower = stats.ttest_1samp(log_ratios, np.log1p(margin), alternative="greater")'


@dataclass(frozen=True)
class Mutant:
    """One break of the code and the tests meant to fail on it."""

    id: str
    file: str
    old: str
    new: str
    tests: tuple[str, ...]
    breaks: str


MUTANTS = [
    Mutant("paired-margin-dropped", "runner/measure/stats.py", PAIRED_ONE_SIDED,
           PAIRED_ONE_SIDED.replace("np.log1p(margin)", "0.0"), (PAIRED_TEST, AGAINST_GATE),
           "the paired test asks whether the job is slower at all, not slower past the margin"),
    Mutant("paired-two-sided", "runner/measure/stats.py", PAIRED_ONE_SIDED,
           PAIRED_ONE_SIDED.replace(', alternative="greater"', ""), (PAIRED_TEST, AGAINST_GATE),
           "the paired test of a slowdown past the margin made two-sided: a clear speedup fails the gate"),
    Mutant("paired-no-spread-margin-dropped", "runner/measure/stats.py", "float(ratio <= 1 + margin)",
           "float(ratio <= 1)",
           (f"{VERDICTS}::test_ratios_without_spread_are_judged_by_the_ratio_against_the_margin",),
           "rounds that all give one ratio are judged against no change, not the margin"),
    Mutant("unpaired-no-spread-margin-dropped", "runner/measure/stats.py", "float(diff <= np.log1p(margin))",
           "float(diff <= 0)", (f"{VERDICTS}::test_ratios_without_spread_are_judged_by_the_ratio_against_the_margin",),
           "processes that all give one median are judged against no change, not the margin"),
    Mutant("unpaired-two-sided", "runner/measure/stats.py",
           'slower = stats.ttest_ind(new - np.log1p(margin), base, equal_var=False, alternative="greater")',
           "slower = stats.ttest_ind(new - np.log1p(margin), base, equal_var=False)",
           (f"{TRUST}::test_gate_against_a_synthetic_baseline",),
           "Welch's test of a slowdown past the margin made two-sided: a clear speedup fails the gate"),
    Mutant("against-margin-dropped", "runner/gate.py",
           'paired_time_ratio(timed.per_servers("baseline"), timed.per_servers("candidate"), margin)',
           'paired_time_ratio(timed.per_servers("baseline"), timed.per_servers("candidate"))', (AGAINST_GATE,),
           "--against fails any significant slowdown, however far under --fail-above"),
    Mutant("against-exits-on-two-sided-p", "runner/gate.py",
           "return REGRESSION_EXIT if estimate.p_slower < SIGNIFICANCE or wrong else 0",
           "return REGRESSION_EXIT if estimate.p_value < SIGNIFICANCE or wrong else 0", (AGAINST_GATE,),
           "--against exits 1 on any significant change, a speedup or a slowdown within the margin"),
    Mutant("stored-paired-margin-dropped", "runner/report/pairing.py", "paired_time_ratio(base_ms, new_ms, margin)",
           "paired_time_ratio(base_ms, new_ms)", (f"{TRUST}::test_runs_paired_by_round_fail_only_past_the_margin",),
           "stored runs timed in the same rounds fail on any significant slowdown, however small"),
    Mutant("could-not-judge-by-point-estimate", "runner/report/gate_verdicts.py", "estimate.high > 1 + margin",
           "estimate.ratio > 1 + margin", (AGAINST_GATE, f"{TRUST}::test_gate_against_a_synthetic_baseline"),
           "a job whose change is within the margin but whose interval reaches past it reads \"ok\""),
    Mutant("uncertainty-bound-10%", "runner/measure/stability.py", "MAX_UNCERTAINTY = 0.05",
           "MAX_UNCERTAINTY = 0.10", (UNCERTAIN,), "a next run up to 10% away counts as stable"),
    Mutant("interval-one-run-only", "runner/measure/stability.py", "t_quantile(0.975, self.df) * np.sqrt(2)",
           "t_quantile(0.975, self.df)", (UNCERTAIN,), "the interval leaves out the next run's own error"),
    Mutant("host-drift-ignored", "runner/measure/result.py",
           "stated = between_runs(earlier_ms, result.metrics[names.STEP_MEDIAN_MS]) or result.spread",
           "stated = result.spread",
           ("tests/integration/test_tracking.py::"
            "test_from_its_third_run_a_configuration_states_its_interval_from_what_its_runs_moved",),
           "a run's interval leaves out what its configuration's earlier runs moved (the host's drift)"),
    Mutant("unresolved-sweep-job-not-flagged", "runner/report/sweep_report.py", "        if unresolved(row):",
           "        if not unresolved(row):",
           (f"{TRUST}::test_a_sweep_flags_the_jobs_whose_speedup_it_could_not_resolve",),
           "a sweep flags the jobs it resolved, not the ones whose speedup interval holds 1"),
    Mutant("a-tight-no-change-unresolved", "runner/report/table.py", "within = estimate.low >=",
           "within = False and estimate.low >=",
           (f"{TRUST}::test_a_sweep_flags_the_jobs_whose_speedup_it_could_not_resolve",),
           "an interval within 5% around no change reads not resolved, and flags a job that matches its baseline"),
    Mutant("unpaired-drift-ignored", "runner/report/pairing.py", "if len(halves) == 2 else estimate",
           "if len(halves) == 3 else estimate",
           (f"{TRUST}::test_runs_timed_apart_take_in_both_runs_stated_intervals",),
           "runs timed apart compare on their workers alone: the host's drift between them reads as a difference"),
    Mutant("uncertainty-over-steps", "runner/measure/stability.py", "min(BLOCKS, len(repeat))", "len(repeat)",
           (f"{VERDICTS}::test_blocks_are_the_stretches_the_loop_moves_memory_between",),
           "every step its own block: a tail of slow steps widens the interval"),
    Mutant("host-drift-from-one-earlier-run", "runner/measure/stability.py", "MIN_EARLIER_RUNS = 2",
           "MIN_EARLIER_RUNS = 1", (HOST_DRIFT,), "two runs (one degree of freedom) state the host's drift"),
    Mutant("host-drift-from-every-earlier-run", "runner/measure/stability.py", "MAX_EARLIER_RUNS = 10",
           "MAX_EARLIER_RUNS = 100", (HOST_DRIFT,), "runs of any age state the host's drift, not the newest 10"),
    Mutant("disagreeing-processes-pass", "runner/measure/stability.py", "if len(process_medians) > 1:",
           "if len(process_medians) > 99:", (f"{VERDICTS}::test_processes_that_disagree_make_the_median_uncertain",),
           "the processes' medians are not judged, only their blocks"),
    Mutant("mann-whitney-no-continuity", "runner/measure/stats.py", 'mannwhitneyu(a, b, alternative="two-sided")',
           'mannwhitneyu(a, b, alternative="two-sided", use_continuity=False)',
           ("tests/unit/test_compare.py::test_mann_whitney_matches_known_exact_values",),
           "tied timings' p without the continuity correction (0.07 for 0.11)"),
    Mutant("worker-processes-ignored", "runner/backends/base.py",
           "return cls.traits.default_processes if requested is None else requested",
           "return cls.traits.default_processes",
           ("tests/integration/test_measure.py::test_instability_advice_is_what_the_runner_accepts",),
           "measure.processes=N is ignored: the rerun the advice names times as few processes as before"),
    Mutant("token-not-masked", "runner/secrets.py", "pwd|token|secret", "pwd|secret",
           ("tests/unit/test_secrets.py::test_credentials_are_masked",), "?token=... and token: ... are shown"),
    Mutant("flag-value-not-masked", "runner/secrets.py", r'|(?(flag)\s+(?!-)|(?!)))"', r')"',
           ("tests/unit/test_secrets.py::test_credentials_are_masked",), "--token abc is shown"),
    Mutant("hydra-escaped-not-masked", "runner/secrets.py", r"\s*\\?[=:]", r"\s*[=:]",
           ("tests/unit/test_secrets.py::test_a_sweeps_job_overrides_are_masked_as_hydra_writes_them",),
           "a sweep's job override ?token\\=abc, as Hydra escapes it, is shown"),
    Mutant("non-finite-in-lists", "runner/config_loading.py",
           '''    elif isinstance(value, list):
        for index, item in enumerate(value):
            _refuse_non_finite(item, f"{key}[{index}]")
''', "", ("tests/unit/test_config.py::test_non_finite_numbers_inside_lists_name_their_place",),
           "inf and nan inside a list (workload.shapes=[[4,inf]]) pass validation"),
    Mutant("duration-unbounded", "runner/config.py", "value is not None and value > DAY_S", "False",
           ("tests/unit/test_config.py::test_a_duration_takes_up_to_a_day_and_more_is_refused_naming_the_key",),
           "measure.warmup_s=1e308 is accepted and warms up for ever"),
    Mutant("other-host-claim-free", "runner/job/life.py", 'if owner.get("host") != platform.node():',
           'if owner.get("host") == platform.node():',
           ("tests/integration/test_job.py::test_a_claim_from_another_host_is_held_though_its_pid_is_free_here",),
           "a folder claimed by a live job on another host is taken as free"),
    Mutant("sweep-folder-unclaimed", "runner/callbacks.py", 'claim_folder(self.sweep_dir, "hydra.sweep.dir")',
           'release_folder(self.sweep_dir)',
           ("tests/system/test_cli.py::test_a_sweep_refuses_a_folder_another_live_sweep_works_in_before_its_parent_run",),
           "two sweeps given one folder at once each count the other's jobs as their own"),
    Mutant("scheduled-dead-job-not-closed", "runner/job/dead.py", "not in (JobStatus.SCHEDULED, JobStatus.RUNNING)",
           "!= JobStatus.RUNNING",
           ("tests/integration/test_job.py::test_a_sweep_stopped_early_counts_the_jobs_it_never_started",),
           "a job whose process died before it wrote RUNNING is counted 'not run' and its death goes unrecorded"),
    Mutant("stop-as-run-opens-untagged", "runner/job/run.py",
           "            mlflow_write(lambda: mlflow.set_tag(names.TAG_ERROR, reason))\n", "",
           ("tests/integration/test_job.py::test_a_stop_as_the_run_opens_closes_it_killed_with_its_reason",),
           "a stopped job's run is KILLED without runner.error saying why"),
    Mutant("dropped-stop-loses-its-reason", "runner/signals.py",
           "    raise_if_stopped()  # a stop Python dropped", "    _swallowed.clear()  # a stop Python dropped",
           ("tests/unit/test_signals.py::test_a_stop_python_dropped_keeps_its_reason_when_a_second_signal_raises_it",),
           "a Ctrl-C Python dropped, then the sweep's SIGTERM: the run says SIGTERM"),
    Mutant("fork-server-request-unheld", "runner/execute/forkserver_private.py",
           "        with signals_held():\n            # _fds", "        if True:\n            # _fds",
           ("tests/integration/test_processes.py::"
            "test_a_ctrl_c_as_the_fork_server_is_asked_for_a_child_leaves_the_server_serving",),
           "a stop between the connect and the request leaves the fork server dead with a traceback"),
    Mutant("rank-compute-from-the-median", "runner/execute/ranks.py",
           "compute = [timing.compute_ms for timing in timings]",
           "compute = [m * (1 - t.share) for m, t in zip(medians, timings, strict=True)]",
           ("tests/unit/test_collectives.py::"
            "test_the_slow_rank_keeps_its_compute_though_its_profiled_step_waited_for_the_other",),
           "a rank's compute is its median less its profiled step's share, which a wait for a late rank shrinks"),
    Mutant("op-table-shortest-first", "runner/measure/optable.py",
           "rows.sort(key=lambda row: row[time_key], reverse=True)", "rows.sort(key=lambda row: row[time_key])",
           ("tests/unit/test_op_table.py::test_ops_run_longest_self_time_first",),
           "the op table no longer lists the longest ops first"),
    Mutant("profiled-step-total-not-mean", "runner/measure/optable.py",
           "metrics[names.PROFILED_STEP_MS] = step_ms / sum(r[names.OP_CALLS] for r in steps)",
           "metrics[names.PROFILED_STEP_MS] = step_ms",
           ("tests/integration/test_profiling.py::"
            "test_the_profiled_step_is_the_mean_of_every_recorded_step_and_ops_run_longest_first",),
           "time/profiled_step_ms with several profiled steps is their sum, not one step"),
    Mutant("locked-store-not-retried", "runner/tracking/run.py", "LOCKED_RETRIES = 12", "LOCKED_RETRIES = 1",
           ("tests/unit/test_job_status.py::test_a_dead_jobs_run_is_closed_through_a_locked_store",),
           "a run is not closed when a second connection holds the SQLite store locked"),
    Mutant("blocks-halved", "runner/measure/stability.py", "BLOCKS = 8", "BLOCKS = 4",
           (f"{VERDICTS}::test_a_repeat_is_cut_into_8_blocks",),
           "a repeat is cut into 4 blocks, not the 8 docs/trust.md names: its median's interval from half the medians"),
    Mutant("faster-by-point-estimate", "runner/report/gate_verdicts.py", "if estimate.high < 1:",
           "if estimate.ratio < 1:", (f"{VERDICTS}::test_faster_needs_the_whole_interval_below_1_not_the_estimate",),
           "a -3% [-15%, +14%] change reads \"faster\", not \"could not judge\""),
    Mutant("caught-from-without-margin", "runner/report/gate_verdicts.py",
           "return (1 + margin) * (1 + estimate.detectable) - 1", "return estimate.detectable",
           (f"{VERDICTS}::test_caught_from_is_the_margin_plus_what_the_spread_hides",),
           "a gate that catches +7.8% says it catches +2.7%: the margin left out of \"caught from\""),
    Mutant("regression-counted-not-judged", "runner/report/gate_verdicts.py",
           "return p_holm >= SIGNIFICANCE and estimate.high > 1 + margin", "return estimate.high > 1 + margin",
           (f"{VERDICTS}::test_a_regression_is_not_counted_among_the_jobs_not_judged",),
           "the summary counts a REGRESSION among the jobs \"not judged\""),
    Mutant("change-point-penalty-x10", "runner/report/change_points.py", "PENALTY = 2.0", "PENALTY = 20.0",
           ("tests/unit/test_history.py::test_a_10_percent_step_through_5_percent_noise_is_found",),
           "the README's 10% step through 5% noise, found in 100 of 100 series, is found in about 20"),
    *(Mutant(f"{suffix.strip('_')}-fall-not-a-regression", "runner/report/series.py", HIGHER_IS_BETTER,
             HIGHER_IS_BETTER.replace(f', "{suffix}"', ""),
             (f"tests/unit/test_history.py::test_fail_on_regression_judges_the_newest_segment[{metric}-fell]",),
             f"--fail-on-regression passes a *{suffix} metric that fell and fails one that rose")
      for suffix, metric in [("gbps", "achieved_gbps"), ("gflops", "achieved_gflops"),
                             ("_fraction", "compute_fraction")]),
    Mutant("store-check-reads-only-the-schema", "runner/tracking/store.py",
           'db.execute("PRAGMA quick_check(1)").fetchall()',
           """db.execute("SELECT 'ok' FROM sqlite_master LIMIT 1").fetchall()""",
           ("tests/unit/test_store.py::test_a_damaged_page_behind_an_intact_header_is_refused",),
           "a store with a damaged page behind its intact header and schema passes the check; MLflow fails later"),
    Mutant("dead-job-scores-0", "hydra_plugins/runner_launcher/process_launcher.py",
           "status=JobStatus.COMPLETED, _return_value=NO_RESULT)", "status=JobStatus.COMPLETED, _return_value=0.0)",
           (f"{LAUNCHER}::test_a_dead_job_in_the_runners_sweep_is_a_nan_result_and_its_status_says_why",),
           "a dead job's result in the runner's sweep is 0.0: an optimizing sweeper takes it as the best"),
    Mutant("dead-job-completed-in-a-plain-app", "hydra_plugins/runner_launcher/process_launcher.py",
           "return JobReturn(overrides, status=JobStatus.FAILED,",
           "return JobReturn(overrides, status=JobStatus.COMPLETED,",
           (f"{LAUNCHER}::test_a_dead_job_fails_in_any_other_hydra_app",),
           "a plain Hydra app's dead job is COMPLETED, its value the error object: the sweep goes on as if it ran"),
    Mutant("azure-sas-sig-not-masked", "runner/secrets.py", "auth(?:orization)?|sig))", "auth(?:orization)?))",
           (f"{SECRETS}[azure-sas-sig]",), "an Azure SAS URL's &sig=... is shown"),
    Mutant("auth-not-masked", "runner/secrets.py", "auth(?:orization)?|", "authorization|",
           (f"{SECRETS}[query-auth]",), "?auth=... is shown"),
    Mutant("aws-secret-access-key-not-masked", "runner/secrets.py", "(?:access|account)[_-]?key|",
           "account[_-]?key|",
           (f"{SECRETS}[aws-secret-access-key]",), "AWS_SECRET_ACCESS_KEY=... is shown"),
    Mutant("password-tail-after-at-shown", "runner/secrets.py", r"""(?P<userinfo>[^/\s'\"]+)@""",
           r"""(?P<userinfo>[^/\s'\"@]+)@""", (f"{SECRETS}[at-in-password]",),
           "a password holding an unencoded @ is masked only up to it: its tail is shown"),
    Mutant("bare-bearer-shown", "runner/secrets.py", "return BEARER.sub(lambda m: f\"{m['scheme']}{MASK}\", text)",
           "return text", (f"{SECRETS}[bearer-in-a-message]",), "a bearer token outside a header is shown"),
    Mutant("account-key-shown", "runner/secrets.py", "(?:access|account)[_-]?key|", "access[_-]?key|",
           (f"{SECRETS}[azure-account-key]",), "an Azure connection string's AccountKey=... is shown"),
    Mutant("coverage-of-the-largest-profile", "runner/backends/neuron.py",
           "summary.metrics.get(names.NEURON_TOTAL_TIME_SUM)",
           'summary.metrics.get(f"{names.NEURON_SUMMARY_PREFIX}total_time")',
           ("tests/unit/test_neuron_coverage.py::test_coverage_is_of_every_profiles_device_time_not_the_largest_ones",),
           "device-time coverage against the largest profile, not all: over 100% when a job ran several NEFFs"),
    Mutant("trn1-lnc-2-halves-its-cores", "runner/backends/cores.py", 'if generation == "trn1" or not value:',
           "if not value:", ("tests/unit/test_neuron_settings.py::test_a_trn1_core_is_half_its_chip_whatever_the_lnc",),
           "NEURON_LOGICAL_NC_CONFIG=2 on Trn1 (no LNC there) makes a core a whole chip: its peak doubled"),
    Mutant("turns-not-added-up", "runner/measure/turns.py", "left[name] -= time.monotonic() - started",
           "left[name] -= 0.0",
           ("tests/unit/test_turns.py::test_a_worker_slow_in_every_turn_is_hung_once_its_turns_add_up_past_its_time",),
           "a worker slow in every turn runs for ever: only one turn at a time is bounded"),
    Mutant("hung-job-times-its-own", "runner/sweep/rounds.py", "if isinstance(samples, ChildSilent):", "if False:",
           ("tests/integration/test_rounds.py::test_a_hung_job_is_stopped_past_its_time_and_the_others_keep_their_rounds",),
           "a job whose round worker hung is left to time its own steady state, where it hangs again"),
    Mutant("hung-record-ignored", "runner/measure/loop.py", "raise HungWorkload(data[HUNG_KEY])", "return None",
           ("tests/unit/test_rounds.py::"
            "test_a_job_its_sweeps_rounds_found_hung_fails_with_why_instead_of_timing_it_again",),
           "a job the rounds found hung times its own steady state and hangs the sweep"),
    Mutant("negative-jobs-accepted", "runner/config.py", "if jobs is not None and jobs < 0:",
           "if jobs is not None and jobs < -1:",
           ("tests/unit/test_process_launcher.py::"
            "test_a_launcher_refuses_a_limit_that_would_hang_or_kill_every_job_in_any_hydra_app",),
           "hydra.launcher.jobs=-1 leaves no slot and the launcher polls for ever"),
    Mutant("cold-stretch-timed", "runner/measure/loop.py",
           "timed_call() > SETTLED_RATIO * warm_ms or call < SETTLE_CALLS",
           "timed_call() > math.inf or call < SETTLE_CALLS",
           ("tests/unit/test_turns.py::"
            "test_a_stretch_after_another_workers_turn_is_settled_until_a_call_is_within_ten_percent_of_a_warm_one",),
           "a stretch after another worker's turn is timed cold: its first steps read up to 2.2x, its median high"),
    Mutant("stretch-floor-dropped", "runner/measure/loop.py",
           "return max(FEWEST_TIMED_STEPS, FEWEST_STEPS_A_STRETCH * layouts_count(backend.traits.default_layouts))",
           "return FEWEST_TIMED_STEPS",
           ("tests/integration/test_measure.py::test_long_steps_are_timed_for_measure_steps_s_and_no_fewer_than_the_floor",),
           "a worker with long steps times 4 steps a stretch at 8x512x1024: its speedups agree less with a Timer's"),
    Mutant("turns-stretch-unsettled", "runner/measure/loop.py",
           "if stretch or isinstance(turns, RefereedTurns):", "if stretch:",
           ("tests/integration/test_measure.py::test_workers_taking_turns_run_their_warm_ups_and_stretches_one_at_a_time",),
           "the first stretch after the others' warm-ups is timed cold"),
    Mutant("paired-floor-dropped", "runner/report/table.py", "if floored.low < estimate.low:", "if False:",
           (f"{TRUST}::test_a_paired_interval_is_at_least_what_the_workers_saw_within_themselves",),
           "3 rounds agreeing by chance give a paired CI narrower than each worker's own layouts allow"),
    Mutant("workers-spread-across-workers", "runner/measure/stability.py",
           "squares = sum(float(((blocks - blocks.mean()) ** 2).sum()) for blocks in repeats)",
           "squares = float(((np.concatenate(repeats) - np.concatenate(repeats).mean()) ** 2).sum())",
           (f"{VERDICTS}::test_a_workers_spread_is_its_blocks_about_their_own_worker_and_not_the_workers_apart",),
           "what a round shared (workers apart) widens the paired floor, which pairing cancels"),
]  # fmt: skip
PYTEST = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-q", "-rfE"]
# pytest's exit statuses: tests failed, or collection failed (the mutant broke an import)
FAILED_STATUSES = (1, 2)
NO_TESTS_COLLECTED = 5


def missing_test(tree: Path, node_id: str) -> str | None:
    """`node_id` when its file has no such test function (a renamed test would otherwise go unnoticed)."""
    path, _, name = node_id.partition("::")
    source = tree / path
    function = name.split("[")[0].split("::")[-1]
    if not source.is_file() or (function and f"def {function}(" not in source.read_text()):
        return node_id
    return None


def stale_reason(tree: Path, mutant: Mutant) -> str | None:
    """Why `mutant` cannot be tested in `tree`: its file, its old text (exactly once) or a test is missing."""
    source = tree / mutant.file
    if not source.is_file():
        return f"no file {mutant.file}"
    found = source.read_text().count(mutant.old)
    if found != 1:
        return f"its old text occurs {found} times in {mutant.file}"
    missing = [node for node in mutant.tests if missing_test(tree, node)]
    return f"no test {', '.join(missing)}" if missing else None


def failed_tests(output: str) -> list[str]:
    """The node ids of pytest's short summary's FAILED and ERROR lines (-rfE)."""
    return re.findall(r"^(?:FAILED|ERROR) (\S+)", output, flags=re.MULTILINE)


def pytest_in(tree: Path, args: list[str]) -> subprocess.CompletedProcess[str]:
    """pytest run from `tree`, so the copy's packages are the ones imported."""
    return subprocess.run([*PYTEST, *args], cwd=tree, capture_output=True, text=True)


def check_shadowing(tree: Path) -> None:
    """Refuse to run if `runner` imports from anywhere but the copy: every mutant would survive."""
    where = subprocess.run([sys.executable, "-c", "import runner; print(runner.__file__)"], cwd=tree,
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    if not Path(where).is_relative_to(tree):
        raise SystemExit(f"error: from {tree} python imports runner from {where}, not the copy")


def run_mutant(base: Path, mutant: Mutant, fail_anyway: list[str]) -> tuple[str, str]:
    """Apply `mutant` to a fresh copy of `base` and run its tests there: its result and the test that failed."""
    with tempfile.TemporaryDirectory(prefix=f"mutant-{mutant.id}-") as folder:
        tree = Path(folder) / "tree"
        shutil.copytree(base, tree)
        source = tree / mutant.file
        source.write_text(source.read_text().replace(mutant.old, mutant.new, 1))
        deselect = [arg for node in fail_anyway for arg in ("--deselect", node)]
        done = pytest_in(tree, ["-x", *deselect, *mutant.tests])
    if done.returncode == 0:
        return "SURVIVED", f"no test failed; it breaks: {mutant.breaks}"
    if done.returncode in FAILED_STATUSES:
        return "killed", (failed_tests(done.stdout) or ["(collection failed)"])[0]
    if done.returncode == NO_TESTS_COLLECTED:
        return "stale", "every named test fails unmutated"
    return "stale", f"pytest exited {done.returncode}: {done.stdout.strip().splitlines()[-1:]}"


def selected(only: list[str] | None) -> list[Mutant]:
    """The mutants --only names (all without it); one line naming the known ids for an unknown one."""
    if not only:
        return MUTANTS
    known = {mutant.id for mutant in MUTANTS}
    unknown = [name for name in only if name not in known]
    if unknown:
        raise SystemExit(f"error: --only {', '.join(unknown)}: no such mutant; choose from: {', '.join(sorted(known))}")
    return [mutant for mutant in MUTANTS if mutant.id in only]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutants")
    mutants = selected(parser.parse_args(argv).only)
    with tempfile.TemporaryDirectory(prefix="mutants-") as folder:
        base = copy_project(Path(folder) / "tree", ("tests", "benchmarks"))
        check_shadowing(base)
        rows = [(m, stale_reason(base, m)) for m in mutants]
        named = sorted({test for mutant, stale in rows if stale is None for test in mutant.tests})
        started = time.monotonic()
        unmutated = pytest_in(base, named) if named else None
        if unmutated is not None and unmutated.returncode not in (0, *FAILED_STATUSES):
            raise SystemExit(f"error: the named tests could not run unmutated:\n{unmutated.stdout[-3000:]}")
        fail_anyway = failed_tests(unmutated.stdout) if unmutated else []
        print(f"unmutated: {len(named)} named tests in {time.monotonic() - started:.0f} s; "
              f"failing anyway (left out): {', '.join(fail_anyway) or 'none'}", flush=True)  # fmt: skip
        width = max(len(m.id) for m in mutants)
        print(f"{'mutant':<{width}}  {'result':<8}  {'s':>4}  failing test (or why stale)", flush=True)
        results = []
        for mutant, stale in rows:
            started = time.monotonic()
            result, test = ("stale", stale) if stale else run_mutant(base, mutant, fail_anyway)
            results.append(result)
            print(f"{mutant.id:<{width}}  {result:<8}  {time.monotonic() - started:4.0f}  {test}", flush=True)
    print(f"{len(results)} mutants: {results.count('killed')} killed, {results.count('SURVIVED')} survived, "
          f"{results.count('stale')} stale")  # fmt: skip
    return 0 if results.count("killed") == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
