"""Every metric, tag and artifact name the runner writes, and the op table's columns, defined once.

Writers and readers (the comparison, the plots, the tests) import names from here, so a rename
cannot leave a reader behind. Metric names use slashes so the MLflow UI groups them; tags use dots.
"""

from __future__ import annotations

import os

# --- metrics: the measurement phases (runner.measure) ---
STEP_MEDIAN_MS = "time/step_median_ms"
STEP_MEAN_MS = "time/step_mean_ms"
STEP_MIN_MS = "time/step_min_ms"
STEP_P10_MS = "time/step_p10_ms"
STEP_P90_MS = "time/step_p90_ms"
STEP_IQR_MS = "time/step_iqr_ms"
STEP_CV = "time/step_cv"
# steps timed over all processes and repeats (measure.steps_s may time fewer than measure.steps)
STEPS_TIMED = "time/steps_timed"
REPEAT_CV = "time/repeat_cv"
# one value per worker process (history step = process index), and their spread
PROCESS_MEDIAN_MS = "time/process_median_ms"
PROCESS_CV = "time/process_cv"
# how far the next identical run's time/step_median_ms may land, in percent either way (about 95%)
STEP_MEDIAN_UNCERTAINTY_PCT = "time/step_median_uncertainty_pct"
# the 95% half-width, in percent, of time/step_median_ms from its blocks' spread inside each worker: what pairing by
# round leaves, the least a paired speedup's interval can be
WORKER_SPREAD_PCT = "time/worker_spread_pct"
FIRST_CALL_S = "time/first_call_s"
# where the steady state is timed by device events (runner.step_clock): the synchronized step's wall time, the
# profiler's device time per step, and the rest of the wall (launches, the host's Python, idle), all in ms
SYNC_STEP_MS = "time/sync_step_ms"
DEVICE_BUSY_MS = "time/device_busy_ms"
HOST_AND_IDLE_MS = "time/host_and_idle_ms"
MEASURED_S = "time/measured_s"
JOB_S = "time/job_s"
PROFILED_STEP_MS = "time/profiled_step_ms"
PROFILER_STEP_MS = "profiler/step_ms"
PROFILER_OVERHEAD_PCT = "profiler/overhead_pct"
PROFILER_ACTIVE_STEPS = "profiler/active_steps"
# the profiler's own cost per recorded step, measured apart from the window
PROFILER_COST_MS = "profiler/cost_ms"
COMPILE_GRAPHS = "compile/graphs"
# measure.copies: steady states timed side by side, and their steps per second together
SCALING_COPIES = "scaling/copies"
SCALING_THROUGHPUT = "scaling/throughput_per_s"
COMPILE_NEFFS_NEW = "compile/neffs_new"
# measure.mode=throughput: steps per second, the median block's time, and measure.inflight
THROUGHPUT_STEPS_PER_S = "throughput/steps_per_s"
THROUGHPUT_BLOCK_MS = "throughput/block_ms"
THROUGHPUT_INFLIGHT = "throughput/inflight"
# measure.compile_cache: the lookups, what they count (torch's or the NEFF cache's), cold or warm, the folder
COMPILE_CACHE_HITS = "compile/cache_hits"
COMPILE_CACHE_MISSES = "compile/cache_misses"
TAG_COMPILE_CACHE_COUNTED = "compile.cache_counted"
TAG_COMPILE_CACHE = "compile.cache"
TAG_COMPILE_CACHE_DIR = "compile.cache_dir"

# --- metrics: the op table ---
CPU_SELF_TOTAL_MS = "cpu/self_total_ms"
DEVICE_SELF_TOTAL_MS = "device/self_total_ms"
OPS_DEVICE_KERNELS = "ops/device_kernels"
OPS_ATEN = "ops/aten_ops"
OPS_CALLS_PER_STEP = "ops/calls_per_step"
OPS_TOP_SHARE = "ops/top_op_share"

# --- metrics: memory, accuracy, roofline ---
# measure.layer_accuracy: how many submodule outputs are over tolerance
LAYERS_FAILING = "accuracy/layers_failing"
PEAK_DEVICE_MB = "memory/peak_device_mb"
PEAK_HOST_RSS_MB = "memory/peak_host_rss_mb"
ACCURACY_MAX_ABS_ERR = "accuracy/max_abs_err"
ACCURACY_MAX_REL_ERR = "accuracy/max_rel_err"
ACCURACY_TOLERANCE = "accuracy/tolerance"
ROOFLINE_BYTES = "roofline/bytes"
ROOFLINE_FLOPS = "roofline/flops"
ROOFLINE_STEP_MS = "roofline/step_ms"
ROOFLINE_ACHIEVED_GBPS = "roofline/achieved_gbps"
ROOFLINE_ACHIEVED_GFLOPS = "roofline/achieved_gflops"
ROOFLINE_INTENSITY = "roofline/intensity"
ROOFLINE_PEAK_GBPS = "roofline/peak_gbps"
ROOFLINE_PEAK_GFLOPS = "roofline/peak_gflops"
ROOFLINE_BANDWIDTH_FRACTION = "roofline/bandwidth_fraction"
ROOFLINE_COMPUTE_FRACTION = "roofline/compute_fraction"

# --- metrics: a Neuron capture and neuron-explorer's summary ---
NEURON_CAPTURE_OK = "neuron/capture_ok"
NEURON_CAPTURE_FILES = "neuron/capture_files"
NEURON_CAPTURE_BYTES = "neuron/capture_bytes"
NEURON_NTFF_FILES = "neuron/ntff_files"
NEURON_NEFF_FILES = "neuron/neff_files"
NEURON_PB_FILES = "neuron/pb_files"
NEURON_DROPPED_EVENTS = "neuron/dropped_events"
NEURON_PROFILES = "neuron/profiles"
NEURON_TOTAL_TIME_SUM = "neuron/total_time_sum"
# Explorer's busy time (total_active_time) summed over the profiles, in seconds: coverage's denominator
NEURON_TOTAL_ACTIVE_TIME_SUM = "neuron/total_active_time_sum"
# neuron-explorer's own summary metrics are logged under this prefix, with its names
NEURON_SUMMARY_PREFIX = "neuron/"
# key_averages()'s device time in ms, and it over Explorer's on-device total, as a fraction
NEURON_FRAMEWORK_DEVICE_MS = "neuron/framework_device_ms"
NEURON_DEVICE_TIME_COVERAGE = "neuron/device_time_coverage"
# distinct ATen ops that ran on the CPU instead of the NeuronCore
NEURON_CPU_FALLBACK_OPS = "neuron/cpu_fallback_ops"
# Explorer's system profile: per event source its events and their time in ms, and the HBM peak
NEURON_SYSTEM_EVENTS = "neuron/system_{source}_events"
NEURON_SYSTEM_MS = "neuron/system_{source}_ms"
NEURON_SYSTEM_HBM_PEAK_BYTES = "neuron/system_hbm_peak_bytes"

# --- tags: what ran where ---
TAG_WORKLOAD = "runner.workload"
TAG_WORKLOAD_TARGET = "runner.workload_target"
TAG_BACKEND = "runner.backend"
TAG_BACKEND_REQUESTED = "runner.backend_requested"
TAG_DEVICE = "runner.device"
# the device share the job got: NeuronCores, a GPU, or CPU threads
TAG_PLACEMENT = "runner.placement"
TAG_HOST = "runner.host"
TAG_PID = "runner.pid"
TAG_OVERRIDES = "runner.overrides"
TAG_OUTPUT_DIR = "runner.output_dir"
TAG_GIT_COMMIT = "runner.git_commit"
TAG_CONFIG_HASH = "runner.config_hash"
TAG_VERSION_PREFIX = "runner.version."
TAG_ENV_PREFIX = "env."
TAG_TOP_OP = "runner.top_op"
TAG_DEVICE_TIME = "runner.device_time"
# what timed the steady state (time/step_*): STEP_CLOCK_HOST or STEP_CLOCK_DEVICE, and whether caches were flushed
TAG_STEP_CLOCK = "runner.step_clock"
STEP_CLOCK_HOST = "host"
STEP_CLOCK_DEVICE = "device"
TAG_ERROR = "runner.error"
TAG_ARTIFACTS_KEPT_LOCAL = "runner.artifacts_kept_local"
# "warning" when the output holds NaN or infinity, with the count in the detail
TAG_OUTPUT_FINITE = "runner.output_finite"

# --- tags: the sweep's parent run ---
TAG_SWEEP = "runner.sweep"
# a job, sweep, doctor or history run; untagged older runs are jobs or sweeps, told apart by runner.sweep
TAG_KIND = "runner.kind"
KIND_JOB = "job"
KIND_SWEEP = "sweep"
KIND_DOCTOR = "doctor"
# per probe: PASS, FAIL or UNKNOWN
TAG_DOCTOR_PREFIX = "doctor."
TAG_SWEEP_DIR = "runner.sweep_dir"
TAG_FAILED_JOBS = "runner.failed_jobs"
TAG_SKIPPED_JOBS = "runner.skipped_jobs"
# comma-separated ids of the FINISHED runs that the sweep's skipped jobs reused
TAG_REUSED_RUNS = "runner.reused_runs"
# comma-separated keys the sweep varies: the runs table's first columns
TAG_SWEPT_KEYS = "runner.swept_keys"
# MLflow UI links: the sweep's runs table (filtered, key columns first), and their comparison
TAG_UI_RUNS_TABLE = "runner.ui.runs_table"
TAG_UI_COMPARE = "runner.ui.compare"
# on each job of a sweep, from the sweep's comparison: its speedup and the run it is against
TAG_COMPARE_SPEEDUP = "compare.speedup"
TAG_COMPARE_BASELINE = "compare.baseline"

# a param: the workload's option name (MLflow's parallel coordinates cut values to 10 characters)
PARAM_WORKLOAD_OPTION = "workload._option_"

# --- tags: accuracy and roofline ---
# measure.layer_accuracy: the first submodule over tolerance ("none" when every layer passes)
TAG_FIRST_FAILING_LAYER = "accuracy.first_failing_layer"
TAG_ACCURACY = "accuracy.check"
TAG_ACCURACY_DETAIL = "accuracy.detail"
TAG_ROOFLINE_PEAK = "roofline.peak"
# "true" or "false", and why not (runner.measure.stability)
TAG_TIMING_STABLE = "timing.stable"
TAG_TIMING_REASONS = "timing.unstable_reasons"
# whether the profiled window, less the profiler's cost, read the steady state; if not, why
TAG_WINDOW_REPRESENTATIVE = "profiler.window_representative"
TAG_WINDOW_REASON = "profiler.window_reason"
# runs with the same id had their workers interleaved round by round, so they pair by round
TAG_ROUNDS_ID = "timing.rounds_id"

# --- tags: Neuron ---
TAG_NEURON_CAPTURE = "neuron.capture"
TAG_NEURON_CAPTURE_PROBLEMS = "neuron.capture_problems"
TAG_NEURON_CORRELATE = "neuron.correlate_device_time"
TAG_NEURON_EXPLORER = "neuron.explorer"
# where Explorer's summary was read from (parquet-12, parquet-7, summary-json or none), and its schema
TAG_NEURON_EXPLORER_SOURCE = "neuron.explorer_source"
TAG_NEURON_EXPLORER_SCHEMA = "neuron.explorer_schema"
# ok, or what key_averages() misses of Explorer's device time (below 95% covered)
TAG_NEURON_DEVICE_TIME_COVERAGE = "neuron.device_time_coverage"
# set when a job pins more NeuronCores than its workload executes on
TAG_NEURON_IDLE_CORES = "neuron.idle_cores"
# ok, or where the physical NeuronCores per logical one disagree with the LNC the runner uses
TAG_NEURON_LNC_CHECK = "neuron.lnc_check"
# the CPU fallback ops' names, "none", or why this torch-neuronx could not tell
TAG_NEURON_CPU_FALLBACKS = "neuron.cpu_fallbacks"

# --- metrics: system series sampled while a job measures (monitor.period_s), one step per sample ---
SYSTEM_PREFIX = "system/"
# the host's busy CPU share and memory in use (neuron-monitor on Neuron, else /proc)
SYSTEM_HOST_CPU_PCT = "system/host/cpu_pct"
SYSTEM_HOST_MEMORY_USED_BYTES = "system/host/memory_used_bytes"
# neuron-monitor, for the measuring process's runtime
SYSTEM_NEURON_PREFIX = "system/neuron/"
SYSTEM_NEURON_CORE_UTILIZATION = "system/neuron/core{core}/utilization_pct"
SYSTEM_NEURON_DEVICE_BYTES = "system/neuron/memory/device_bytes"
SYSTEM_NEURON_HOST_BYTES = "system/neuron/memory/host_bytes"
SYSTEM_NEURON_DEVICE_CATEGORY_BYTES = "system/neuron/memory/device_{category}_bytes"
SYSTEM_NEURON_LATENCY_MS = "system/neuron/latency/{kind}_{percentile}_ms"
SYSTEM_NEURON_ERRORS = "system/neuron/errors/{kind}"
SYSTEM_NEURON_EXECUTIONS = "system/neuron/executions/{outcome}"
SYSTEM_GPU_UTILIZATION_PCT = "system/gpu/utilization_pct"
SYSTEM_GPU_MEMORY_USED_BYTES = "system/gpu/memory_used_bytes"
SYSTEM_GPU_POWER_W = "system/gpu/power_w"

# --- manifest keys (environment.json), read back by tests ---
MANIFEST_NEURON_CORE_COUNT = "neuron.core_count"
MANIFEST_NEURON_VISIBLE_CORES = "neuron.visible_cores"
# the logical NeuronCore setting (LNC) in force and where it came from
MANIFEST_NEURON_LNC = "neuron.lnc"
# backend.cpu_placement, and per steady-state worker: {"cores": [...] or null, "threads": n}
MANIFEST_CPU_PLACEMENT = "cpu.placement"
MANIFEST_CPU_WORKERS = "cpu.workers"
# monitor.period_s: what sampled the system series, how often, and its version
MANIFEST_MONITOR = "monitor"

# --- files of a job's folder: neuron-monitor's configuration, and the figures kept of each report ---
NEURON_MONITOR_CONFIG_FILE = "neuron_monitor.json"
NEURON_MONITOR_SAMPLES_FILE = "neuron_monitor_samples.jsonl"

# --- artifacts of a job's run ---
# the op table (mlflow.log_table) and the profiler's own printed table
OP_TABLE_FILE = "key_averages.json"
OP_TABLE_TEXT_FILE = "key_averages.txt"
# per round: the job's position, the workers in it, and the job's median step time in ms
ROUNDS_FILE = "rounds.json"
LAYER_TABLE_FILE = "layer_accuracy.json"
LAYER_PLOT_FILE = "layer_accuracy.png"
ENVIRONMENT_FILE = "environment.json"
CONFIG_FILE = "config_resolved.yaml"
HYDRA_FOLDER = "hydra"
# TensorBoard's profiler plugin lists only *.pt.trace.json (older runs' trace.json is still read)
TRACE_FOLDER = "trace"
# one recorded cycle's trace, named by its last ProfilerStep#N (runs before 2026-12-05 by N + 1)
TRACE_ITER_FOLDER = "iteration_{step}"
TRACE_FILE = "trace.pt.trace.json"
# the framework trace NeuronProfiler.export_trace writes into its capture
NEURON_FRAMEWORK_TRACE_FILE = "trace.json"
NEURON_PROFILE_FOLDER = "neuron_profile"
NEURON_SUMMARY_FILE = "neuron_summary.json"
PLOTS_FOLDER = "plots"
RANK_STEPS_PLOT_FILE = "rank_steps.png"
# capture files over tracking.max_artifact_mb that stayed local, with their paths and sizes
KEPT_LOCAL_FILE = "artifacts_kept_local.json"
# a sweep's parent run's (plots under plots/)
COMPARISON_FILE = "comparison.json"
COMPARISON_TEXT_FILE = "comparison.md"
CROSSOVERS_FILE = "crossovers.md"
SCALING_FILE = "scaling.md"
SWEEP_SUMMARY_FILE = "sweep_summary.txt"
STEP_TIME_PLOT_FILE = "step_time.png"
OP_BREAKDOWN_PLOT_FILE = "op_breakdown.png"
ROOFLINE_PLOT_FILE = "roofline.png"
COST_FRONTIER_PLOT_FILE = "cost_frontier.png"
SHAPE_CURVES_PLOT_FILE = "shape_curves.png"
CORE_SCALING_PLOT_FILE = "core_scaling.png"
QUEUE_DEPTH_PLOT_FILE = "queue_depth.png"

# --- runner.compare --diff BEFORE AFTER: logged under trace_diff/<before>_to_<after>/ of the newer run ---
TRACE_DIFF_FOLDER = "trace_diff"
DIFF_TEXT_FILE = "diff.md"
DIFF_FILE = "diff.json"
DIFF_PERFETTO_FILE = "perfetto.json"

# --- performance over time (python -m runner.history): its own run, of kind "history" ---
KIND_HISTORY = "history"
TAG_HISTORY_METRIC = "history.metric"
HISTORY_TEXT_FILE = "history.md"
HISTORY_FILE = "history.json"
HISTORY_PLOT_FILE = "history_{config_hash}.png"
# the doctor's report (files and its run's artifacts)
DOCTOR_PAGE_FILE = "doctor.md"
DOCTOR_FILE = "doctor.json"

# --- the op table's layout: its version and columns ---
# runs without runner.op_table_version were logged before the tag, in version 1's layout
TAG_OP_TABLE_VERSION = "runner.op_table_version"
OP_TABLE_VERSION = 1
OP_TABLE_UNTAGGED_VERSION = 1
# the versions the readers (runner.report.reader) understand
OP_TABLE_READABLE_VERSIONS = (1,)
OP_NAME = "name"
OP_INPUT_SHAPES = "input_shapes"
OP_CALLS = "calls"
OP_CALLS_PER_STEP = "calls_per_step"
OP_SELF_CPU_MS = "self_cpu_ms"
OP_CPU_TOTAL_MS = "cpu_total_ms"
# device columns only when the profiler reported device time, memory columns only with profile_memory
OP_SELF_DEVICE_MS = "self_device_ms"
OP_DEVICE_TOTAL_MS = "device_total_ms"
OP_CPU_MEMORY_BYTES = "cpu_memory_bytes"
OP_SELF_CPU_MEMORY_BYTES = "self_cpu_memory_bytes"
OP_DEVICE_MEMORY_BYTES = "device_memory_bytes"
OP_SELF_DEVICE_MEMORY_BYTES = "self_device_memory_bytes"
OP_FLOPS = "flops"
# with several profiler cycles: the self time per step in each cycle (JSON list), its mean and deviation
OP_CYCLE_SELF_MS = "cycle_self_ms"
OP_CYCLE_SELF_MS_MEAN = "cycle_self_ms_mean"
OP_CYCLE_SELF_MS_STD = "cycle_self_ms_std"
# key_averages() folds the ProfilerStep#N ranges into one row whose name starts so
OP_STEP_PREFIX = "ProfilerStep"

# --- metrics and tags: a job run as several ranks (distributed.ranks) ---
# each rank's output folder, and where ranks other than 0 log their metrics and files
RANK_FOLDER = "rank{rank}"
RANKS = "ranks/count"
# the largest per-rank median step time, and it over the median rank's
RANKS_STEP_MEDIAN_MAX_MS = "ranks/step_median_ms_max"
RANKS_STRAGGLER_RATIO = "ranks/straggler_ratio"
# per-rank compute per step (step time less collectives): slowest over fastest
RANKS_COMPUTE_SPREAD = "ranks/compute_spread"
# means over ranks: the recorded steps' share in collectives, and the share that overlapped compute
RANKS_COLLECTIVE_SHARE = "ranks/collective_share"
RANKS_COLLECTIVE_OVERLAP = "ranks/collective_overlap"
# per rank, under rank<k>/: the same share and overlap, and compute per step in ms
RANK_COLLECTIVE_SHARE = "collective_share"
RANK_COLLECTIVE_OVERLAP = "collective_overlap"
RANK_COMPUTE_MS = "compute_ms"
# the rank with the most compute per step: the one the others wait for
TAG_SLOWEST_RANK = "ranks.slowest"
# a collective workload: nccl-tests' bandwidths, the link's figure (conf/peaks.yaml), busbw over it
COLLECTIVE_ALGBW_GBPS = "collective/algbw_gbps"
COLLECTIVE_BUSBW_GBPS = "collective/busbw_gbps"
COLLECTIVE_LINK_GBPS = "collective/link_gbps"
COLLECTIVE_BUSBW_LINK_FRACTION = "collective/busbw_fraction_of_link"
# the link the ranks cross (intra-chip, chip-to-chip, node-to-node) and its figure, or why none
TAG_COLLECTIVE_LINK = "collective.link"

# --- memory beside time (measure.memory_snapshot) ---
# the highest memory the profiled window's allocations held at once, and what it was read from
MEMORY_WINDOW_PEAK_MB = "memory/window_peak_mb"
TAG_MEMORY_SOURCE = "memory.source"
# the pickle PyTorch's memory_viz opens, and the allocations live at the peak by site, largest first
MEMORY_FOLDER = "memory"
MEMORY_SNAPSHOT_FILE = "memory_snapshot.pickle"
MEMORY_SITES_FILE = "memory_sites.json"
MEMORY_SITE = "site"
MEMORY_SITE_BYTES = "bytes"

# --- run names ---
# overrides no run name shows: where results go, and whether earlier ones are reused
OUTPUT_OVERRIDES = ("tracking=", "tracking.", "hydra.", "resume=")
# a job's name also leaves out group selections (the workload is a word of its own)
_UNNAMED = ("workload=", "experiment=", *OUTPUT_OVERRIDES)
# the sweep's swept keys, comma-separated, from the sweep's process to its jobs
SWEPT_KEYS_ENV = "RUNNER_SWEPT_KEYS"
# the sweep folder's subfolder where its interleaved rounds leave each job's steady state
ROUNDS_FOLDER = "rounds"


def self_time_column(has_device_time: bool) -> str:
    """The op table column ops are ranked by: device self time where the profiler reported it, else CPU."""
    return OP_SELF_DEVICE_MS if has_device_time else OP_SELF_CPU_MS


def swept_keys() -> set[str]:
    """The keys the sweep this job belongs to varies; none for a single run."""
    return {key for key in os.environ.get(SWEPT_KEYS_ENV, "").split(",") if key}


def job_name(workload: str, overrides: list[str], swept: set[str]) -> str:
    """The workload and the job's overrides, those the sweep varies first: the MLflow UI cuts names short."""
    shown = [o for o in overrides if not o.lstrip("+").startswith(_UNNAMED)]
    # by the key each sets: `+measure.copies=4` sets measure.copies
    varied = [o for o in shown if o.lstrip("+~").split("=", 1)[0] in swept]
    rest = [o for o in shown if o not in varied]
    words = [workload, *varied] if "workload" in swept else [*varied, workload]
    return " ".join([*words, *rest])
