"""The Neuron probes of the profiler and its capture: NeuronConfig, the profile modes, what a profiled run leaves.

docs/trainium.md lists the assumptions; each probe checks one through the runner's own backend code.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import torch

from runner import names
from runner.backends.neuron_capture import DROPPED_EVENTS, NO_SOURCE, NOT_RUN, PARQUET, first_json_object
from runner.config import NEURON_MODES, ProfilerConfig, ScheduleConfig
from runner.doctor.neuron_host import NeuronHost, neuron_backend, profiled_run, tiny_spec
from runner.doctor.probe import Assumption, ProcessFailed, Verdict

# the smallest dropped-event budget that still records something
_TINY_EVENT_BUDGET = 16


# --- what runs in the fresh processes ------------------------------------------------------


def _config_accepted(capture_dir: Path) -> dict[str, Any]:
    from torch_neuronx.profiling import NeuronConfig

    config = neuron_backend().profiler_kwargs(ProfilerConfig(max_events_per_nc=100_000), capture_dir)[
        "experimental_config"
    ]
    return {
        "signature": str(inspect.signature(NeuronConfig)),
        "experimental": isinstance(config, torch._C._profiler._ExperimentalConfig),
    }


def _profile_modes() -> list[str]:
    from torch_neuronx.profiling import ProfileMode

    return [member.name for member in ProfileMode]


def _correlate_status(capture_dir: Path) -> str:
    backend = neuron_backend()
    backend.profiler_kwargs(ProfilerConfig(correlate_device_time=True), capture_dir)
    return backend.correlate_status


# --- the probes ----------------------------------------------------------------------------

# the verdicts one profiled run gives
PROFILED_RUN_PROBES = ("device_time", "capture_layout", "framework_trace_name", "summary_json", "explorer_parquet")


def probe_neuron_config(host: NeuronHost) -> Verdict:
    """NeuronConfig takes the keywords the runner passes and is an _ExperimentalConfig."""
    check = Assumption(
        "neuron_config",
        "NeuronConfig(modes=, capture_enabled_for_nc=, profile_output_dir=, neff_cache_dir=, max_events_per_nc=)",
    )
    fix = "runner/backends/neuron.py profiler_kwargs builds it: every Neuron job with the profiler on fails"
    try:
        found = host.run(_config_accepted, host.folder("neuron_config"))
    except ProcessFailed as err:
        return check.fails(str(err), fix, breaks_runner=True)
    accepted = "accepted" if found["experimental"] else "not a torch._C._profiler._ExperimentalConfig"
    return check.judge(found["experimental"], f"{accepted}; signature {found['signature']}", fix, breaks_runner=True)


def probe_profile_modes(host: NeuronHost) -> Verdict:
    """ProfileMode has every member profiler.modes allows."""
    check = Assumption("profile_modes", f"ProfileMode has {', '.join(NEURON_MODES)}")
    members = host.run(_profile_modes)
    missing = [m for m in NEURON_MODES if m not in members]
    fix = f"profiler.modes: leave out {', '.join(missing)} (profiler=neuron_full and neuron_system use them)"
    return check.judge(not missing, f"members: {', '.join(members)}", fix, breaks_runner=True)


def probe_correlate_device_time(host: NeuronHost) -> Verdict:
    """NeuronConfig accepts the undocumented correlate_device_time."""
    check = Assumption("correlate_device_time", "NeuronConfig accepts correlate_device_time (undocumented)")
    status = host.run(_correlate_status, host.folder("correlate"))
    if status == "passed":
        return check.holds("accepted")
    fix = "profiler.correlate_device_time: leave it null (the runner already goes on without it and tags the run)"
    return check.fails(status, fix)


def probes_from_profiled_run(host: NeuronHost) -> list[Verdict]:
    """Device time, capture layout, the framework trace's name, summary-json and Parquet, from one run."""
    try:
        run = host.run(profiled_run, tiny_spec(), host.folder("profiled"))
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


def _listing_by_folder(files: dict[str, int]) -> str:
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
    listing = _listing_by_folder(files)
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
    spec = tiny_spec(profiler=ProfilerConfig(max_events_per_nc=_TINY_EVENT_BUDGET))
    run = host.run(profiled_run, spec, host.folder("dropped_events"))
    if found := DROPPED_EVENTS.search(run["stderr"]):
        return check.holds(found.group(0))
    if found := DROPPED_EVENTS.search(run["stdout"]):
        fix = "neuron/dropped_events stays 0: runner/measure/phases.py profiled_window must read stdout (tee_fd)"
        return check.fails(f"on stdout: {found.group(0)}", fix, breaks_runner=True)
    return check.unknown(f"no dropped-event warning with max_events_per_nc={_TINY_EVENT_BUDGET}")


def probes_from_repeated_schedule(host: NeuronHost) -> list[Verdict]:
    """acc_events with Neuron activities, and one capture per profiler cycle, from one run of two cycles."""
    acc = Assumption("acc_events", "torch.profiler accepts acc_events=True with NeuronConfig")
    per_cycle = Assumption("captures_per_cycle", "schedule.repeat=2 gives two captures, each with its framework trace")
    schedule = ScheduleConfig(wait=0, warmup=1, active=1, repeat=2)
    try:
        run = host.run(profiled_run, tiny_spec(schedule=schedule), host.folder("repeat"))
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
    run = host.run(profiled_run, tiny_spec(cores=cores), host.folder("capture_numbering"))
    ntffs = {name: size for name, size in run["files"].items() if name.endswith(".ntff")}
    evidence = f"backend.cores={cores}, capture_enabled_for_nc=0: " + (
        ", ".join(f"{Path(n).name} ({s} B)" for n, s in ntffs.items()) or "no NTFF"
    )
    fix = (
        f"with backend.cores={cores} set profiler.capture_enabled_for_nc={pinned[0]} (absolute); "
        "runner/backends/neuron.py capture_cores assumes relative indices"
    )
    return check.judge(any(size > 0 for size in ntffs.values()), evidence, fix, breaks_runner=True)
