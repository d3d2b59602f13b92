"""One probe per Neuron assumption (docs/trainium.md lists them), each through the runner's own backend code.

Every device use happens in a spawned process, so each probe starts, as a job does, from a runtime
that is not running; the doctor's own process never touches the runtime.
"""

from __future__ import annotations

import inspect
import json
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from runner import names
from runner.backends.base import CaptureReport
from runner.backends.cores import LNC_ENV, lnc_check, logical_nc_config, parse_cores
from runner.backends.neuron import (
    DEFAULT_CACHES,
    INFLIGHT_ENV,
    NEFF_CACHE_ENV,
    VISIBLE_CORES_ENV,
    NeuronBackend,
    torch_neuron,
    trainium_generation,
)
from runner.backends.neuron_capture import (
    DROPPED_EVENTS,
    NO_SOURCE,
    NOT_RUN,
    PARQUET,
    SUMMARY_JSON,
    explorer_summary,
    first_json_object,
    session_dirs,
)
from runner.backends.neuron_coverage import driver_events
from runner.backends.neuron_fallback import note_cpu_fallbacks
from runner.backends.neuron_tools import NEURON_BIN, neuron_tool
from runner.backends.user_env import ASYNC_NRT_ENV
from runner.config import (
    NEURON_MODES,
    MeasureConfig,
    NeuronBackendConfig,
    ProfilerConfig,
    RunSpec,
    ScheduleConfig,
    TrackingConfig,
    WorkloadSpec,
)
from runner.doctor.probe import UNKNOWN, Assumption, FreshProcess, ProcessFailed, Verdict, in_fresh_process
from runner.execute.monitor import NeuronMonitorSampler
from runner.execute.monitor_reader import NEURON_MONITOR
from runner.execute.ranks import Rendezvous, free_port, torchrun_env
from runner.measure.build import build_workload
from runner.measure.compile_cache import use_compile_cache
from runner.measure.loop import timed_step, warm_up
from runner.measure.memory import recording, window_memory
from runner.measure.phases import profiled_window
from runner.measure.profiling import STDOUT_FD, tee_fd

# the smallest dropped-event budget that still records something
TINY_EVENT_BUDGET = 16
# the steps right after the runner's warm-up count as cold when their median is this much
# slower than the steady median, and by more than a NEFF's documented first-run cost could hide
WARM_TOLERANCE = 1.5
COLD_EXCESS_MS = 0.5
FIRST_TIMED = 3
TIMED_STEPS = 20
# the LNC the Neuron tools report for each device: "the current logical NeuronCore configuration"
# (SDK:tools/neuron-sys-tools/neuron-ls.rst, `neuron-ls -j` and its field definitions)
NEURON_LS = "neuron-ls"
RUNTIME_LNC = "neuron-ls -j's logical_neuroncore_config"


@dataclass(frozen=True)
class NeuronHost:
    """What the probes share: the visible NeuronCores (absolute indices), a scratch folder, a time limit."""

    cores: list[int]
    scratch: Path
    timeout_s: float

    def folder(self, probe: str) -> Path:
        """A fresh capture folder for one probe."""
        path = self.scratch / probe
        path.mkdir(parents=True, exist_ok=True)
        return path


# --- what runs in the fresh processes ------------------------------------------------------


def _neuron_module() -> Any:
    """`torch.neuron`, after importing torch-neuronx (which registers it) in this fresh process."""
    import torch_neuronx  # noqa: F401

    return torch_neuron()


def visible_cores() -> list[int]:
    """The NeuronCores this host shows a process (absolute indices); does not start the runtime."""
    visible = os.environ.get(VISIBLE_CORES_ENV)
    return parse_cores(visible, VISIBLE_CORES_ENV) if visible else list(range(_neuron_module().device_count()))


def _backend() -> NeuronBackend:
    return NeuronBackend(NeuronBackendConfig())


def _config_accepted(capture_dir: Path) -> dict[str, Any]:
    from torch_neuronx.profiling import NeuronConfig

    config = _backend().profiler_kwargs(ProfilerConfig(max_events_per_nc=100_000), capture_dir)["experimental_config"]
    return {
        "signature": str(inspect.signature(NeuronConfig)),
        "experimental": isinstance(config, torch._C._profiler._ExperimentalConfig),
    }


def _profile_modes() -> list[str]:
    from torch_neuronx.profiling import ProfileMode

    return [member.name for member in ProfileMode]


def _correlate_status(capture_dir: Path) -> str:
    backend = _backend()
    backend.profiler_kwargs(ProfilerConfig(correlate_device_time=True), capture_dir)
    return backend.correlate_status


def _queries_only() -> int:
    _neuron_module().is_available()
    return int(_neuron_module().device_count())


def _start_runtime() -> str:
    backend = _backend()
    torch.zeros(1).to(backend.device)
    backend.synchronize()
    return backend.placement()


def _start_runtime_unchecked() -> str:
    """Start the runtime with whatever NEURON_RT_VISIBLE_CORES says: the runner's own check would refuse a gap."""
    neuron = _neuron_module()
    torch.zeros(1).to("neuron")
    neuron.synchronize()
    return f"{VISIBLE_CORES_ENV}={os.environ.get(VISIBLE_CORES_ENV)}"


def _count_before_and_after_pin(first_core: int) -> tuple[int, int]:
    before = int(_neuron_module().device_count())
    os.environ[VISIBLE_CORES_ENV] = str(first_core)
    return before, int(_neuron_module().device_count())


def _async_after_import() -> str | None:
    _neuron_module()
    return os.environ.get(ASYNC_NRT_ENV)


def _inflight_after_import_and_backend() -> tuple[str | None, str | None]:
    """The removed variable after torch-neuronx loaded, then after the runner's backend started up."""
    _neuron_module()
    at_import = os.environ.get(INFLIGHT_ENV)
    _backend()
    return at_import, os.environ.get(INFLIGHT_ENV)


def _rank_joins(timeout_s: float) -> dict[str, Any]:
    """Join the `neuron` process group as a runner's rank does (backend, group, then device) and all-reduce a one."""
    import torch.distributed as dist

    backend = _backend()
    runtime_before = bool(_neuron_module().is_initialized())
    dist.init_process_group(backend.collective_backend, timeout=timedelta(seconds=timeout_s))
    try:
        total = torch.ones(1).to(backend.device)
        dist.all_reduce(total)
        backend.synchronize()
        return {"sum": float(total.item()), "cores": int(_neuron_module().device_count()), "before": runtime_before}
    finally:
        dist.destroy_process_group()


def tiny_spec(hidden: int = 64, cores: str | None = None, **configs: Any) -> RunSpec:
    """A small naive RMSNorm job (`configs`: its profiler, schedule or measure); a new `hidden` means new NEFFs."""
    workload = WorkloadSpec(
        target="workloads.rmsnorm.NaiveRMSNorm", kwargs={"hidden": hidden, "batch": 1, "seq_len": 8}
    )
    configs = {"profiler": ProfilerConfig(), "schedule": ScheduleConfig(), "measure": MeasureConfig(), **configs}
    return RunSpec(workload, NeuronBackendConfig(cores=cores), tracking=TrackingConfig(enabled=False), **configs)


def profiled_run(spec: RunSpec, capture_dir: Path) -> dict[str, Any]:
    """The runner's first call and profiled window, then its capture inspection; what a probe reads."""
    backend = NeuronBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    timed_step(workload, backend)
    with tee_fd(STDOUT_FD) as stdout:
        table, _, stderr, _ = profiled_window(workload, backend, spec, capture_dir)
    report = backend.inspect_capture(capture_dir, spec.profiler, stderr, table.device_self_ms)
    # summary-json asked for by name: the report read Explorer's first format it produces (Parquet)
    summary_json = explorer_summary(session_dirs(capture_dir), backend.config.explorer_timeout_s, (SUMMARY_JSON,))
    files = sorted(p for p in capture_dir.rglob("*") if p.is_file())
    return {
        "device_time": table.has_device_time,
        "drivers": driver_events(capture_dir),
        "stderr": stderr,
        "stdout": "".join(stdout),
        "files": {str(p.relative_to(capture_dir)): p.stat().st_size for p in files},
        "tags": {k: v for k, v in report.tags.items() if v is not None},
        "summary_json": summary_json.raw,
        "summary_json_status": summary_json.tags[names.TAG_NEURON_EXPLORER],
    }


def neffs_with_cache_set_in_process(folder: Path, capture_dir: Path) -> dict[str, int]:
    """Set the NEFF cache folder as `measure.compile_cache` does (torch-neuronx loaded, nothing run), then profile."""
    _neuron_module()
    os.environ[NEFF_CACHE_ENV] = str(folder)
    run = profiled_run(tiny_spec(hidden=80), capture_dir)
    return {
        "in_folder": sum(1 for _ in folder.rglob("*.neff")),
        "captured": sum(name.endswith(".neff") for name in run["files"]),
    }


def cold_cache_job(root: Path, capture_dir: Path, watched: tuple[Path, ...]) -> dict[str, Any]:
    """A cold `measure.compile_cache` job's profiled run: NEFFs in its folder, files the `watched` caches gained."""
    # rglob finds nothing in a folder that does not exist
    before = {folder: set(folder.rglob("*")) for folder in watched}
    spec = tiny_spec(96, measure=MeasureConfig(compile_cache="cold", compile_cache_dir=str(root)))
    use_compile_cache(spec)
    profiled_run(spec, capture_dir)
    return {
        "in_folder": sum(1 for _ in root.rglob("*.neff")),
        "gained": {str(folder): len(set(folder.rglob("*")) - files) for folder, files in before.items()},
    }


def first_executions(spec: RunSpec) -> dict[str, Any]:
    """Times of the first calls, of the first step after the runner's warm-up, and of the steady state (ms)."""
    backend = NeuronBackend(spec.backend)
    workload = build_workload(spec.workload, backend)
    first = [timed_step(workload, backend) * 1000 for _ in range(3)]
    warm_up(workload, backend, spec)
    after = [timed_step(workload, backend) * 1000 for _ in range(TIMED_STEPS)]
    return {
        "first": first,
        "after_warm_up": statistics.median(after[:FIRST_TIMED]),
        "steady": statistics.median(after[TIMED_STEPS // 2 :]),
    }


def monitored_runtime(folder: Path, period_s: int) -> dict[str, Any]:
    """The runner's neuron-monitor sampler over a started runtime for two and a half periods: its series and errors."""
    _start_runtime()
    sampler = NeuronMonitorSampler(period_s, folder)
    sampler.start()
    time.sleep(2.5 * period_s)
    samples = sampler.stop()
    return {
        "samples": len(samples),
        "keys": sorted({key for s in samples for key in s.values}),
        "errors": sampler.errors,
    }


def fallbacks_of_one_step() -> dict[str, Any]:
    """One step of the tiny workload, its CPU fallbacks read as a job reads them (runner.backends.neuron_fallback)."""
    backend = _backend()
    timed_step(build_workload(tiny_spec().workload, backend), backend)
    report = CaptureReport()
    note_cpu_fallbacks(report)
    return {
        "tag": report.tags[names.TAG_NEURON_CPU_FALLBACKS],
        "ops": report.metrics.get(names.NEURON_CPU_FALLBACK_OPS),
    }


def snapshot_of_one_step(folder: Path) -> dict[str, Any] | None:
    """One step recorded and read back as measure.memory_snapshot records a window; None without the calls."""
    backend = _backend()
    history = backend.memory_history()
    if history is None:
        return None
    workload = build_workload(tiny_spec().workload, backend)
    snapshot = folder / names.MEMORY_SNAPSHOT_FILE
    with recording(backend, history, snapshot):
        timed_step(workload, backend)
    peak = window_memory(history, folder, snapshot)
    return {"peak": peak.peak_bytes, "sites": peak.sites}


# --- the probes ----------------------------------------------------------------------------

# the verdicts one profiled run gives
PROFILED_RUN_PROBES = ("device_time", "capture_layout", "framework_trace_name", "summary_json", "explorer_parquet")


def _run(host: NeuronHost, target: Callable[..., Any], *args: Any, env: dict[str, str | None] | None = None) -> Any:
    return in_fresh_process(target, *args, env=env, timeout_s=host.timeout_s)


def probe_neuron_config(host: NeuronHost) -> Verdict:
    """NeuronConfig takes the keywords the runner passes and is an _ExperimentalConfig."""
    check = Assumption(
        "neuron_config",
        "NeuronConfig(modes=, capture_enabled_for_nc=, profile_output_dir=, neff_cache_dir=, max_events_per_nc=)",
    )
    fix = "runner/backends/neuron.py profiler_kwargs builds it: every Neuron job with the profiler on fails"
    try:
        found = _run(host, _config_accepted, host.folder("neuron_config"))
    except ProcessFailed as err:
        return check.fails(str(err), fix, breaks_runner=True)
    accepted = "accepted" if found["experimental"] else "not a torch._C._profiler._ExperimentalConfig"
    return check.judge(found["experimental"], f"{accepted}; signature {found['signature']}", fix, breaks_runner=True)


def probe_profile_modes(host: NeuronHost) -> Verdict:
    """ProfileMode has every member profiler.modes allows."""
    check = Assumption("profile_modes", f"ProfileMode has {', '.join(NEURON_MODES)}")
    members = _run(host, _profile_modes)
    missing = [m for m in NEURON_MODES if m not in members]
    fix = f"profiler.modes: leave out {', '.join(missing)} (profiler=neuron_full and neuron_system use them)"
    return check.judge(not missing, f"members: {', '.join(members)}", fix, breaks_runner=True)


def probe_correlate_device_time(host: NeuronHost) -> Verdict:
    """NeuronConfig accepts the undocumented correlate_device_time."""
    check = Assumption("correlate_device_time", "NeuronConfig accepts correlate_device_time (undocumented)")
    status = _run(host, _correlate_status, host.folder("correlate"))
    if status == "passed":
        return check.holds("accepted")
    fix = "profiler.correlate_device_time: leave it null (the runner already goes on without it and tags the run)"
    return check.fails(status, fix)


def probe_runtime_not_started_by_queries(host: NeuronHost) -> Verdict:
    """A process that only called is_available() and device_count() holds no NeuronCore."""
    check = Assumption("runtime_not_started_by_queries", "is_available() and device_count() do not start the runtime")
    core = str(host.cores[-1])
    env: dict[str, str | None] = {VISIBLE_CORES_ENV: core}
    with FreshProcess(_queries_only, env=env, hold=True) as asker:
        asker.result(host.timeout_s)
        try:
            placed = _run(host, _start_runtime, env=env)
        except ProcessFailed as err:
            evidence = f"NeuronCore {core} was taken by a process that only asked is_available()/device_count(): {err}"
            fix = (
                "backend.cores pins after device_count(): pin through the environment instead "
                f"(export {VISIBLE_CORES_ENV}=..., or hydra/launcher=parallel)"
            )
            return check.fails(evidence, fix, breaks_runner=True)
    return check.holds(f"another process started on NeuronCore {core} ({placed}) while the asking process was alive")


def probe_cores_reserved(host: NeuronHost) -> Verdict:
    """The process that starts the runtime reserves every visible core, used or not."""
    check = Assumption("cores_reserved", "a process reserves all its visible NeuronCores")
    if len(host.cores) < 2:
        return check.unknown("needs 2 NeuronCores")
    pair = f"{host.cores[-2]}-{host.cores[-1]}"
    with FreshProcess(_start_runtime, env={VISIBLE_CORES_ENV: pair}, hold=True) as holder:
        holder.result(host.timeout_s)
        try:
            _run(host, _start_runtime, env={VISIBLE_CORES_ENV: str(host.cores[-1])})
        except ProcessFailed as err:
            return check.holds(f"NeuronCore {host.cores[-1]} refused: {err}")
    evidence = f"a second process started on NeuronCore {host.cores[-1]}, owned but unused by a process on {pair}"
    return check.fails(evidence, "nothing to set: launchers pin each job to its own cores either way")


def probe_contiguous_cores(host: NeuronHost) -> Verdict:
    """NEURON_RT_VISIBLE_CORES must be one contiguous range."""
    check = Assumption("contiguous_cores", f"the runtime refuses a non-contiguous {VISIBLE_CORES_ENV}")
    if len(host.cores) < 3:
        return check.unknown("needs 3 NeuronCores")
    gapped = f"{host.cores[0]},{host.cores[2]}"
    try:
        placed = _run(host, _start_runtime_unchecked, env={VISIBLE_CORES_ENV: gapped})
    except ProcessFailed as err:
        return check.holds(f"{VISIBLE_CORES_ENV}={gapped} refused: {err}")
    fix = "nothing to set: backend.cores and hydra.launcher.cores refuse gaps, stricter than this runtime"
    return check.fails(f"{VISIBLE_CORES_ENV}={gapped} started ({placed})", fix)


def probe_device_count_cached(host: NeuronHost) -> Verdict:
    """device_count() keeps its first answer after NEURON_RT_VISIBLE_CORES changes."""
    check = Assumption("device_count_cached", "device_count() caches its first answer")
    if len(host.cores) < 2:
        return check.unknown("needs 2 NeuronCores to see a change")
    before, after = _run(host, _count_before_and_after_pin, host.cores[0])
    fix = "nothing to set: environment.json counts the pinned cores from the pin itself"
    return check.judge(before == after, f"{before} before pinning one core, {after} after", fix)


def probe_async_default(host: NeuronHost) -> Verdict:
    """torch-neuronx sets TORCH_NEURONX_ENABLE_ASYNC_NRT=1 at import when unset, and keeps a user's value."""
    check = Assumption(
        "async_default",
        f"{ASYNC_NRT_ENV}: torch-neuronx sets 1 at import when unset (documented default 0); a user's value stays",
    )
    unset = _run(host, _async_after_import, env={ASYNC_NRT_ENV: None})
    users = _run(host, _async_after_import, env={ASYNC_NRT_ENV: "0"})
    evidence = f"unset before import: {unset} after it (set by torch-neuronx); set to 0 by the user: {users} after it"
    if users != "0":
        fix = f"backend.async_runtime cannot take effect: torch-neuronx overrides {ASYNC_NRT_ENV} at import"
        return check.fails(evidence, fix, breaks_runner=True)
    if unset != "1":
        evidence = f"unset before import: {unset or 'still unset'} after it, so the documented default 0 applies"
        fix = f"nothing breaks: environment.json records {ASYNC_NRT_ENV} as it is; backend.async_runtime sets it"
        return check.fails(evidence, fix)
    return check.holds(evidence)


def probe_inflight_removed(host: NeuronHost) -> Verdict:
    """Nothing sets the removed NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS, and the user's environment does not."""
    check = Assumption(
        "inflight_removed",
        f"{INFLIGHT_ENV} (removed in Neuron SDK 2.32) is set by neither torch-neuronx nor the runner",
    )
    at_import, after_backend = _run(host, _inflight_after_import_and_backend, env={INFLIGHT_ENV: None})
    if at_import is not None:
        fix = "nothing the runner sets: this torch-neuronx predates SDK 2.31's explicit async API; update it"
        return check.fails(f"torch-neuronx set {INFLIGHT_ENV}={at_import} at import", fix)
    if after_backend is not None:
        fix = "runner/backends/neuron.py must not set it: SDK 2.32 removed it, and 2.31 ignores it with a warning"
        return check.fails(f"the runner's backend set {INFLIGHT_ENV}={after_backend}", fix, breaks_runner=True)
    users = os.environ.get(INFLIGHT_ENV)
    if users is not None:
        fix = (
            f"unset {INFLIGHT_ENV}: Neuron SDK 2.32 removed it (2.31 ignores it with a deprecation "
            "warning); it sets no queue depth (measure.inflight queues steps on the host)"
        )
        return check.fails(f"neither sets it, but this environment has {INFLIGHT_ENV}={users}", fix)
    return check.holds("unset after torch-neuronx's import and the runner's backend")


def probe_neff_cache_in_process(host: NeuronHost) -> Verdict:
    """TORCH_NEURONX_NEFF_CACHE_DIR set in-process before first use is the folder NEFFs go to."""
    check = Assumption(
        "neff_cache_in_process",
        f"{NEFF_CACHE_ENV} set in-process after torch-neuronx loaded, before first use, is honoured",
    )
    folder = host.folder("neff_cache_in_process")
    found = _run(host, neffs_with_cache_set_in_process, folder / "neff_cache", folder / "capture")
    evidence = f"{found['in_folder']} NEFF(s) in {folder / 'neff_cache'}; the capture holds {found['captured']}"
    fix = (
        f"measure.compile_cache sets {NEFF_CACHE_ENV} in-process: export it before starting python instead "
        "(its cold and warm counts read the wrong folder)"
    )
    return check.judge(bool(found["in_folder"]), evidence, fix, breaks_runner=True)


def probe_process_group(host: NeuronHost) -> Verdict:
    """Two ranks join the `neuron` process group, one NeuronCore each, the runtime not started before it."""
    check = Assumption(
        "process_group",
        "two ranks join the `neuron` process group on one NeuronCore each; the runtime starts after the group",
    )
    if len(host.cores) < 2:
        return check.unknown("needs 2 NeuronCores")
    pair = host.cores[:2]
    # the variables the runner gives its ranks, so the probe joins as a job's ranks do
    rendezvous = Rendezvous("127.0.0.1", free_port(), uuid.uuid4().hex)
    envs = [
        {**torchrun_env(rendezvous, rank, 2, rank, 2, 0), VISIBLE_CORES_ENV: str(core)}
        for rank, core in enumerate(pair)
    ]
    fix = "distributed.ranks on backend=neuron: each rank joins the `neuron` process group as this probe did"
    with ExitStack() as stack:
        ranks = [
            stack.enter_context(FreshProcess(_rank_joins, host.timeout_s, env=env, name=f"doctor-rank-{rank}"))
            for rank, env in enumerate(envs)
        ]
        try:
            found = [rank.result(host.timeout_s) for rank in ranks]
        except ProcessFailed as err:
            return check.fails(f"a rank failed: {err}", fix, breaks_runner=True)
    evidence = "; ".join(
        f"rank {rank} on NeuronCore {core}: all-reduce {result['sum']:g}, {result['cores']} core(s) visible, "
        f"runtime {'started' if result['before'] else 'not started'} before the group"
        for rank, (core, result) in enumerate(zip(pair, found, strict=True))
    )
    joined = all(r["sum"] == 2 and r["cores"] == 1 and not r["before"] for r in found)
    return check.judge(joined, evidence, fix, breaks_runner=True)


def probes_from_profiled_run(host: NeuronHost) -> list[Verdict]:
    """Device time, capture layout, the framework trace's name, summary-json and Parquet, from one run."""
    try:
        run = _run(host, profiled_run, tiny_spec(), host.folder("profiled"))
    except ProcessFailed as err:
        failed = "a profiled run with profiler=neuron_device"
        return [
            Assumption(name, failed).fails(str(err), "profiler=neuron_device", breaks_runner=True)
            for name in PROFILED_RUN_PROBES
        ]
    return [
        verdict(run)
        for verdict in (_device_time, _capture_layout, _framework_trace_name, _summary_json, _explorer_parquet)
    ]


def _device_time(run: dict[str, Any]) -> Verdict:
    """Whether device events reach key_averages(); without them, whether host-side driver events did."""
    check = Assumption("device_time", "key_averages() carries Neuron device time")
    if run["device_time"]:
        return check.holds("self_device_time_total > 0 for some ops")
    fix = (
        "nothing breaks: the op table has CPU time only, device time comes from neuron-explorer "
        "(neuron/total_time_sum) and neuron/device_time_coverage reads 0 with a warning on every run"
    )
    if run["drivers"]:
        evidence = (
            f"no op has device time; {run['drivers']} privateuse1_driver events reached the profiler as CPU events, "
            "as Kineto defines them (host-side launch events; pytorch issue 166205): no device event came back"
        )
        return check.fails(evidence, fix)
    evidence = "no op has device time, and no privateuse1_driver event reached the profiler: torch-neuronx fed none"
    return check.fails(evidence, fix + "; try profiler.correlate_device_time=true where the build accepts it")


def listing_by_folder(files: dict[str, int]) -> str:
    """`folder: name (size B), ...` per folder of a capture, so long session paths appear once."""
    folders: dict[str, list[str]] = {}
    for name, size in files.items():
        path = Path(name)
        folders.setdefault(str(path.parent), []).append(f"{path.name} ({size} B)")
    return "; ".join(f"{folder}/: {', '.join(entries)}" for folder, entries in folders.items())


def _capture_layout(run: dict[str, Any]) -> Verdict:
    check = Assumption(
        "capture_layout", "capture in <instance>_pid_<pid>/<timestamp>/ with .pb, .neff, .ntff and a framework trace"
    )
    files = run["files"]
    listing = listing_by_folder(files)
    problems = run["tags"].get("neuron.capture_problems")
    if not any("_pid_" in name for name in files) or problems:
        why = problems or "no <instance>_pid_<pid> folder"
        fix = "runner/backends/neuron_capture.py check_capture; the neuron.capture tag will warn on every run"
        return check.fails(f"{why}; files: {listing}", fix, breaks_runner=True)
    return check.holds(listing)


def _framework_trace_name(run: dict[str, Any]) -> Verdict:
    check = Assumption("framework_trace_name", "the framework trace is trace.json")
    traces = [name for name in run["files"] if name.endswith(".json")]
    if any(Path(name).name == names.NEURON_FRAMEWORK_TRACE_FILE for name in traces):
        return check.holds(", ".join(traces))
    fix = "nothing breaks (any *.json counts); README 'Where the capture goes' names trace.json"
    return check.fails(", ".join(traces) or "no *.json", fix)


def _explorer_not_run(status: str) -> bool:
    """Explorer is not installed, or the capture held no device profile: its probes cannot tell."""
    return "not on PATH" in status or status == NOT_RUN


def _summary_json(run: dict[str, Any]) -> Verdict:
    check = Assumption("summary_json", "summary-json is {profile: {metric: value}} with total_time")
    explorer = run["summary_json_status"]
    if _explorer_not_run(explorer):
        return check.unknown(explorer)
    if not run["summary_json"]:
        fix = "neuron/ metrics will be missing; check the explorer version (backend.explorer_timeout_s)"
        return check.fails(explorer or "no output", fix, breaks_runner=True)
    data = first_json_object(run["summary_json"].splitlines()[0])
    nested = bool(data) and all(isinstance(v, dict) for v in data.values())
    entries = list(data.values()) if nested else [data]
    keys = sorted({k for entry in entries for k in entry})
    evidence = f"{'one object per profile' if nested else 'one flat object'}; metrics: {', '.join(keys[:12])}"
    if not all("total_time" in entry for entry in entries):
        fix = "neuron/total_time is missing: runner/backends/neuron_capture.py parse_summary_json"
        return check.fails(evidence, fix, breaks_runner=True)
    return check.judge(nested, evidence, "nothing breaks: a flat object is read as one profile")


def _explorer_parquet(run: dict[str, Any]) -> Verdict:
    check = Assumption(
        "explorer_parquet",
        "neuron-explorer writes its summary as Parquet (Summary, Metadata) in profile schema 7.x or 12.x",
    )
    explorer = str(run["tags"].get(names.TAG_NEURON_EXPLORER, ""))
    if _explorer_not_run(explorer):
        return check.unknown(explorer)
    source = run["tags"].get(names.TAG_NEURON_EXPLORER_SOURCE, NO_SOURCE)
    schema = run["tags"].get(names.TAG_NEURON_EXPLORER_SCHEMA, "none")
    if source.startswith(PARQUET):
        return check.holds(f"{source}, profile schema {schema}")
    fix = (
        "nothing breaks while summary-json is read instead (neuron.explorer_source says so on each run); "
        "to read the Parquet, add its schema to runner/backends/neuron_capture.py KNOWN_SCHEMAS "
        "(neuron-explorer view --show-profile-schema prints it)"
    )
    return check.fails(f"read from {source}; {explorer}", fix)


def probe_dropped_events(host: NeuronHost) -> Verdict:
    """The runtime prints dropped-event warnings on stderr, where the runner reads them."""
    check = Assumption("dropped_events", "'N trace events were dropped' is printed on stderr")
    spec = tiny_spec(profiler=ProfilerConfig(max_events_per_nc=TINY_EVENT_BUDGET))
    run = _run(host, profiled_run, spec, host.folder("dropped_events"))
    if found := DROPPED_EVENTS.search(run["stderr"]):
        return check.holds(found.group(0))
    if found := DROPPED_EVENTS.search(run["stdout"]):
        fix = "neuron/dropped_events stays 0: runner/measure/phases.py profiled_window must read stdout (tee_fd)"
        return check.fails(f"on stdout: {found.group(0)}", fix, breaks_runner=True)
    return check.unknown(f"no dropped-event warning with max_events_per_nc={TINY_EVENT_BUDGET}")


def probes_from_repeated_schedule(host: NeuronHost) -> list[Verdict]:
    """acc_events with Neuron activities, and one capture per profiler cycle, from one run of two cycles."""
    acc = Assumption("acc_events", "torch.profiler accepts acc_events=True with NeuronConfig")
    per_cycle = Assumption("captures_per_cycle", "schedule.repeat=2 gives two captures, each with its framework trace")
    schedule = ScheduleConfig(wait=0, warmup=1, active=1, repeat=2)
    try:
        run = _run(host, profiled_run, tiny_spec(schedule=schedule), host.folder("repeat"))
    except ProcessFailed as err:
        fix = "schedule.repeat: keep 1 on neuron (acc_events is passed only when it is above 1)"
        return [acc.fails(str(err), fix, breaks_runner=True), per_cycle.unknown("the two-cycle run failed")]
    folders = sorted({str(Path(name).parent) for name in run["files"] if name.endswith(".json")})
    evidence = f"{len(folders)} capture folder(s) with a framework trace: {', '.join(folders)}"
    fix = "schedule.repeat: keep 1 on neuron, so the capture matches the recorded cycle"
    return [
        acc.holds("a two-cycle profiled run finished"),
        per_cycle.judge(len(folders) == schedule.repeat, evidence, fix),
    ]


def probe_capture_numbering(host: NeuronHost) -> Verdict:
    """capture_enabled_for_nc counts from the process's first visible core."""
    check = Assumption(
        "capture_numbering", "capture_enabled_for_nc indices are relative to the process's visible cores"
    )
    if len(host.cores) < 2:
        return check.unknown("needs 2 NeuronCores to pin away from core 0")
    pinned = host.cores[2:4] if len(host.cores) >= 4 else host.cores[-1:]
    cores = f"{pinned[0]}-{pinned[-1]}" if len(pinned) > 1 else str(pinned[0])
    run = _run(host, profiled_run, tiny_spec(cores=cores), host.folder("capture_numbering"))
    ntffs = {name: size for name, size in run["files"].items() if name.endswith(".ntff")}
    evidence = f"backend.cores={cores}, capture_enabled_for_nc=0: " + (
        ", ".join(f"{Path(n).name} ({s} B)" for n, s in ntffs.items()) or "no NTFF"
    )
    fix = (
        f"with backend.cores={cores} set profiler.capture_enabled_for_nc={pinned[0]} (absolute); "
        "runner/backends/neuron.py capture_cores assumes relative indices"
    )
    return check.judge(any(size > 0 for size in ntffs.values()), evidence, fix, breaks_runner=True)


def probe_first_execution(host: NeuronHost) -> Verdict:
    """The runner's warm-up covers the cost of a NEFF's first executions."""
    warmup = MeasureConfig().warmup
    check = Assumption(
        "first_execution", f"after the first call and measure.warmup={warmup} calls, steps run at steady speed"
    )
    spec = tiny_spec(96, cores=str(host.cores[0]), profiler=ProfilerConfig(enabled=False))
    times = _run(host, first_executions, spec)
    first = ", ".join(f"{t:.2f}" for t in times["first"])
    evidence = (
        f"first three calls {first} ms; median of the {FIRST_TIMED} steps after the warm-up "
        f"{times['after_warm_up']:.3f} ms; steady median {times['steady']:.3f} ms"
    )
    excess = times["after_warm_up"] - times["steady"]
    warm = times["after_warm_up"] <= WARM_TOLERANCE * times["steady"] or excess <= COLD_EXCESS_MS
    fix = f"raise measure.warmup (or measure.warmup_s) above {warmup}: the steady state starts cold"
    return check.judge(warm, evidence, fix, breaks_runner=True)


def probe_neuron_monitor(host: NeuronHost) -> Verdict:
    """neuron-monitor runs and prints the documented JSON, read by the runner's sampler for a process's runtime."""
    # neuron-monitor user guide ("The JSON output format"): one report per period, runtimes by pid
    check = Assumption(
        "neuron_monitor",
        f"{NEURON_MONITOR} -c <config> prints one JSON report per period: the runtime's cores and memory by pid",
    )
    if neuron_tool(NEURON_MONITOR) is None:
        return check.unknown(f"{NEURON_MONITOR} is neither on PATH nor in {NEURON_BIN} (aws-neuronx-tools)")
    found = _run(host, monitored_runtime, host.folder("neuron_monitor"), 1, env={VISIBLE_CORES_ENV: str(host.cores[0])})
    series = [key for key in found["keys"] if key.startswith(names.SYSTEM_NEURON_PREFIX)]
    evidence = f"{found['samples']} report(s) in 2.5 s at period 1s; {len(series)} series of the runtime: " + (
        ", ".join(series[:6]) or "none"
    )
    if found["errors"]:
        evidence += f"; reported: {'; '.join(found['errors'])}"
    fix = (
        "monitor=every_second logs no system/neuron/ series on this host (set monitor=none): "
        "runner/execute/monitor_reader.py neuron_values reads the guide's format"
    )
    read = names.SYSTEM_NEURON_DEVICE_BYTES in series and any(key.endswith("/utilization_pct") for key in series)
    return check.judge(read, evidence, fix, breaks_runner=True)


def probe_memory_snapshot(host: NeuronHost) -> Verdict:
    """torch.neuron.memory has torch.cuda.memory's snapshot calls (inferred: no document names them)."""
    check = Assumption(
        "memory_snapshot", "torch.neuron.memory._record_memory_history and _dump_snapshot record a memory_viz snapshot"
    )
    try:
        found = _run(
            host, snapshot_of_one_step, host.folder("memory_snapshot"), env={VISIBLE_CORES_ENV: str(host.cores[0])}
        )
    except ProcessFailed as err:
        fix = "measure.memory_snapshot=false on neuron: the snapshot calls exist but fail"
        return check.fails(str(err), fix, breaks_runner=True)
    if found is None:
        fix = (
            "nothing breaks: measure.memory_snapshot reads the profiler's memory events (profiler.profile_memory=true)"
        )
        return check.fails("torch.neuron.memory lacks _record_memory_history or _dump_snapshot", fix)
    evidence = f"one step's snapshot: peak {found['peak']} B, sites " + (
        ", ".join(f"{site} {size} B" for site, size in list(found["sites"].items())[:3]) or "none"
    )
    fix = "measure.memory_snapshot=false on neuron: the dumped snapshot holds no allocation the runner can read"
    return check.judge(found["peak"] > 0, evidence, fix, breaks_runner=True)


def probe_cpu_fallbacks(host: NeuronHost) -> Verdict:
    """torch-neuronx lists the ops it ran on the CPU (SRC torch_neuronx/__init__.py; no page read names the calls)."""
    check = Assumption(
        "cpu_fallbacks", "torch_neuronx.get_fallback_ops() lists the ops run on the CPU since clear_op_tracking()"
    )
    found = _run(host, fallbacks_of_one_step, env={VISIBLE_CORES_ENV: str(host.cores[0])})
    evidence = f"one step of a tiny RMSNorm: neuron.cpu_fallbacks={found['tag']!r}"
    fix = "nothing breaks: runs tag neuron.cpu_fallbacks as unknown and log no neuron/cpu_fallback_ops"
    return check.judge(found["ops"] is not None, evidence, fix)


def reported_lnc(timeout_s: float) -> tuple[str | None, str]:
    """The LNC `neuron-ls -j` reports (its devices' values), run with NEURON_LOGICAL_NC_CONFIG unset; else why none.

    The host's own setting (/opt/aws/neuron/logical_nc_config, SDK:deploy/eks/prerequisites.rst) can
    make the runtime's default differ from the generation's documented one, which the runner assumes.
    """
    tool = neuron_tool(NEURON_LS)
    if tool is None:
        return None, f"{NEURON_LS} is neither on PATH nor in {NEURON_BIN}"
    env = {name: value for name, value in os.environ.items() if name != LNC_ENV}
    try:
        done = subprocess.run([tool, "-j"], env=env, capture_output=True, text=True, timeout=timeout_s, check=True)
        values = {str(device["logical_neuroncore_config"]) for device in json.loads(done.stdout)}
    except (OSError, subprocess.SubprocessError, ValueError, TypeError, KeyError) as err:
        return None, f"{NEURON_LS} -j gave none ({type(err).__name__}: {err})"
    return ", ".join(sorted(values)) or None, "no device listed"


def probe_lnc(host: NeuronHost) -> Verdict:
    """The runtime's logical NeuronCores follow NEURON_LOGICAL_NC_CONFIG; unset, its LNC is the runner's default."""
    generation = trainium_generation()
    default, words = logical_nc_config(generation, {})
    check = Assumption(
        "lnc",
        f"{LNC_ENV}=1 gives a logical NeuronCore per physical one; unset, {generation}'s LNC is {words}, "
        f"as {RUNTIME_LNC} reports",
    )
    unset = len(_run(host, visible_cores, env={LNC_ENV: None, VISIBLE_CORES_ENV: None}))
    at_1 = len(_run(host, visible_cores, env={LNC_ENV: "1", VISIBLE_CORES_ENV: None}))
    reported, why_none = reported_lnc(host.timeout_s)
    evidence = f"{unset} logical NeuronCores with {LNC_ENV} unset, {at_1} with {LNC_ENV}=1; {RUNTIME_LNC}: "
    evidence += reported or why_none
    if default is None:
        evidence += f"; the runtime's default reads as LNC {at_1 / unset:g}" if unset else ""
        return check.unknown(evidence, f"set {LNC_ENV} (1 or 2) for per-core peaks")
    _, mismatch = lnc_check((default, words), {RUNTIME_LNC: reported})
    fix = f"per-core peaks and link classes take LNC {default} while {LNC_ENV} is unset: set it (1 or 2)"
    agrees = at_1 == unset * default and not mismatch
    return check.judge(agrees, "; ".join([evidence, *mismatch]), fix, breaks_runner=True)


# the Neuron caches a cache job moves: TorchNeuron's (NEFF, local NEFF, HLO) and torch-xla's
NEURON_CACHES = [NeuronBackend.compile_caches[name] for name in ("neff", "neff_local", "hlo", "neuron_compile_cache")]


def probe_compile_caches(host: NeuronHost) -> Verdict:
    """A cold cache job compiles into its own folder, and the documented default caches gain nothing."""
    check = Assumption(
        "compile_caches",
        f"{', '.join(NEURON_CACHES)}, set in-process as measure.compile_cache sets them, "
        f"move the caches a job fills; {', '.join(map(str, DEFAULT_CACHES))} gain nothing",
    )
    folder = host.folder("compile_caches")
    unset = dict.fromkeys(NEURON_CACHES)
    found = _run(host, cold_cache_job, folder / "cache", folder / "capture", DEFAULT_CACHES, env=unset)
    gained = {path: count for path, count in found["gained"].items() if count}
    evidence = f"{found['in_folder']} NEFF(s) in the job's folder; the default caches gained {gained or 'nothing'}"
    fix = (
        "a cold job is partly warm and writes the user's cache: NeuronBackend.compile_caches misses the "
        "variable that moves it (another process writing those caches meanwhile reads the same)"
    )
    return check.judge(bool(found["in_folder"]) and not gained, evidence, fix, breaks_runner=True)


# every probe with the verdicts it gives, in the order they run (cheap ones first)
PROBES: tuple[tuple[tuple[str, ...], Callable[[NeuronHost], Verdict | list[Verdict]]], ...] = (
    (("neuron_config",), probe_neuron_config),
    (("profile_modes",), probe_profile_modes),
    (("correlate_device_time",), probe_correlate_device_time),
    (("runtime_not_started_by_queries",), probe_runtime_not_started_by_queries),
    (("cores_reserved",), probe_cores_reserved),
    (("contiguous_cores",), probe_contiguous_cores),
    (("device_count_cached",), probe_device_count_cached),
    (("async_default",), probe_async_default),
    (("inflight_removed",), probe_inflight_removed),
    (("neff_cache_in_process",), probe_neff_cache_in_process),
    (("compile_caches",), probe_compile_caches),
    (("lnc",), probe_lnc),
    (("process_group",), probe_process_group),
    (PROFILED_RUN_PROBES, probes_from_profiled_run),
    (("acc_events", "captures_per_cycle"), probes_from_repeated_schedule),
    (("capture_numbering",), probe_capture_numbering),
    (("dropped_events",), probe_dropped_events),
    (("first_execution",), probe_first_execution),
    (("neuron_monitor",), probe_neuron_monitor),
    (("memory_snapshot",), probe_memory_snapshot),
    (("cpu_fallbacks",), probe_cpu_fallbacks),
)
PROBE_NAMES = tuple(name for names, _ in PROBES for name in names)


def neuron_verdicts(host: NeuronHost, report: Callable[[Verdict], None], only: set[str] | None = None) -> list[Verdict]:
    """The Neuron probes (those giving a verdict in `only`, when given); `report` sees each verdict as it comes."""
    verdicts: list[Verdict] = []
    for probe_names, probe in PROBES:
        if only is not None and not only.intersection(probe_names):
            continue
        started = time.perf_counter()
        try:
            found = probe(host)
        except ProcessFailed as err:
            found = [
                Verdict(name, (probe.__doc__ or "").strip(), UNKNOWN, f"the probe could not run: {err}")
                for name in probe_names
            ]
        for verdict in found if isinstance(found, list) else [found]:
            timed = replace(verdict, seconds=round(time.perf_counter() - started, 2))
            report(timed)
            verdicts.append(timed)
    return verdicts
