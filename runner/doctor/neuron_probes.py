"""One probe per Neuron assumption (docs/trainium.md lists them), each through the runner's own backend code.

Here: every probe in the order it runs, and those of the runtime and its environment (cores, variables,
the process group, LNC, compile caches); the profiler's are in `neuron_capture_probes`, the measurement's
in `neuron_measure_probes`, and what they share (the host, the fresh process, the tiny job) in `neuron_host`.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch

from runner.backends.cores import LNC_ENV, lnc_check, logical_nc_config
from runner.backends.neuron import INFLIGHT_ENV, VISIBLE_CORES_ENV, trainium_generation
from runner.backends.neuron_cache import DEFAULT_CACHES, NEFF_CACHE_ENV, NeuronCompileCache
from runner.backends.neuron_tools import NEURON_BIN, neuron_tool
from runner.backends.user_env import ASYNC_NRT_ENV
from runner.config import MeasureConfig
from runner.doctor.neuron_capture_probes import (
    PROFILED_RUN_PROBES,
    probe_capture_numbering,
    probe_correlate_device_time,
    probe_dropped_events,
    probe_neuron_config,
    probe_profile_modes,
    probes_from_profiled_run,
    probes_from_repeated_schedule,
)
from runner.doctor.neuron_host import (
    NeuronHost,
    neuron_backend,
    neuron_module,
    profiled_run,
    start_runtime,
    tiny_spec,
    visible_cores,
)
from runner.doctor.neuron_measure_probes import (
    probe_cpu_fallbacks,
    probe_first_execution,
    probe_memory_snapshot,
    probe_neuron_monitor,
)
from runner.doctor.probe import UNKNOWN, Assumption, FreshProcess, ProcessFailed, Verdict
from runner.execute.ranks import Rendezvous, free_port, torchrun_env
from runner.measure.compile_cache import use_compile_cache

# the LNC the Neuron tools report for each device: "the current logical NeuronCore configuration"
# (SDK:tools/neuron-sys-tools/neuron-ls.rst, `neuron-ls -j` and its field definitions)
_NEURON_LS = "neuron-ls"
_RUNTIME_LNC = "neuron-ls -j's logical_neuroncore_config"


# --- what runs in the fresh processes ------------------------------------------------------


def _queries_only() -> int:
    neuron_module().is_available()
    return int(neuron_module().device_count())


def _start_runtime_unchecked() -> str:
    """Start the runtime with whatever NEURON_RT_VISIBLE_CORES says: the runner's own check would refuse a gap."""
    neuron = neuron_module()
    torch.zeros(1).to("neuron")
    neuron.synchronize()
    return f"{VISIBLE_CORES_ENV}={os.environ.get(VISIBLE_CORES_ENV)}"


def _count_before_and_after_pin(first_core: int) -> tuple[int, int]:
    before = int(neuron_module().device_count())
    os.environ[VISIBLE_CORES_ENV] = str(first_core)
    return before, int(neuron_module().device_count())


def _async_after_import() -> str | None:
    neuron_module()
    return os.environ.get(ASYNC_NRT_ENV)


def _inflight_after_import_and_backend() -> tuple[str | None, str | None]:
    """The removed variable after torch-neuronx loaded, then after the runner's backend started up."""
    neuron_module()
    at_import = os.environ.get(INFLIGHT_ENV)
    neuron_backend()
    return at_import, os.environ.get(INFLIGHT_ENV)


def _rank_joins(timeout_s: float) -> dict[str, Any]:
    """Join the `neuron` process group as a runner's rank does (backend, group, then device) and all-reduce a one."""
    import torch.distributed as dist

    backend = neuron_backend()
    runtime_before = bool(neuron_module().is_initialized())
    dist.init_process_group(backend.traits.collective_backend, timeout=timedelta(seconds=timeout_s))
    try:
        total = torch.ones(1).to(backend.device)
        dist.all_reduce(total)
        backend.synchronize()
        return {"sum": float(total.item()), "cores": int(neuron_module().device_count()), "before": runtime_before}
    finally:
        dist.destroy_process_group()


def _neffs_with_cache_set_in_process(folder: Path, capture_dir: Path) -> dict[str, int]:
    """Set the NEFF cache folder as `measure.compile_cache` does (torch-neuronx loaded, nothing run), then profile."""
    neuron_module()
    os.environ[NEFF_CACHE_ENV] = str(folder)
    run = profiled_run(tiny_spec(hidden=80), capture_dir)
    return {
        "in_folder": sum(1 for _ in folder.rglob("*.neff")),
        "captured": sum(name.endswith(".neff") for name in run["files"]),
    }


def _cold_cache_job(root: Path, capture_dir: Path, watched: tuple[Path, ...]) -> dict[str, Any]:
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


# --- the probes ----------------------------------------------------------------------------


def _probe_runtime_not_started_by_queries(host: NeuronHost) -> Verdict:
    """A process that only called is_available() and device_count() holds no NeuronCore."""
    check = Assumption("runtime_not_started_by_queries", "is_available() and device_count() do not start the runtime")
    core = str(host.cores[-1])
    env: dict[str, str | None] = {VISIBLE_CORES_ENV: core}
    with FreshProcess(_queries_only, env=env, hold=True) as asker:
        asker.result(host.timeout_s)
        try:
            placed = host.run(start_runtime, env=env)
        except ProcessFailed as err:
            evidence = f"NeuronCore {core} was taken by a process that only asked is_available()/device_count(): {err}"
            fix = (
                "backend.cores pins after device_count(): pin through the environment instead "
                f"(export {VISIBLE_CORES_ENV}=..., or hydra/launcher=parallel)"
            )
            return check.fails(evidence, fix, breaks_runner=True)
    return check.holds(f"another process started on NeuronCore {core} ({placed}) while the asking process was alive")


def _probe_cores_reserved(host: NeuronHost) -> Verdict:
    """The process that starts the runtime reserves every visible core, used or not."""
    check = Assumption("cores_reserved", "a process reserves all its visible NeuronCores")
    if len(host.cores) < 2:
        return check.unknown("needs 2 NeuronCores")
    pair = f"{host.cores[-2]}-{host.cores[-1]}"
    with FreshProcess(start_runtime, env={VISIBLE_CORES_ENV: pair}, hold=True) as holder:
        holder.result(host.timeout_s)
        try:
            host.run(start_runtime, env={VISIBLE_CORES_ENV: str(host.cores[-1])})
        except ProcessFailed as err:
            return check.holds(f"NeuronCore {host.cores[-1]} refused: {err}")
    evidence = f"a second process started on NeuronCore {host.cores[-1]}, owned but unused by a process on {pair}"
    return check.fails(evidence, "nothing to set: launchers pin each job to its own cores either way")


def _probe_contiguous_cores(host: NeuronHost) -> Verdict:
    """NEURON_RT_VISIBLE_CORES must be one contiguous range."""
    check = Assumption("contiguous_cores", f"the runtime refuses a non-contiguous {VISIBLE_CORES_ENV}")
    if len(host.cores) < 3:
        return check.unknown("needs 3 NeuronCores")
    gapped = f"{host.cores[0]},{host.cores[2]}"
    try:
        placed = host.run(_start_runtime_unchecked, env={VISIBLE_CORES_ENV: gapped})
    except ProcessFailed as err:
        return check.holds(f"{VISIBLE_CORES_ENV}={gapped} refused: {err}")
    fix = "nothing to set: backend.cores and hydra.launcher.cores refuse gaps, stricter than this runtime"
    return check.fails(f"{VISIBLE_CORES_ENV}={gapped} started ({placed})", fix)


def _probe_device_count_cached(host: NeuronHost) -> Verdict:
    """device_count() keeps its first answer after NEURON_RT_VISIBLE_CORES changes."""
    check = Assumption("device_count_cached", "device_count() caches its first answer")
    if len(host.cores) < 2:
        return check.unknown("needs 2 NeuronCores to see a change")
    before, after = host.run(_count_before_and_after_pin, host.cores[0])
    fix = "nothing to set: environment.json counts the pinned cores from the pin itself"
    return check.judge(before == after, f"{before} before pinning one core, {after} after", fix)


def _probe_async_default(host: NeuronHost) -> Verdict:
    """torch-neuronx sets TORCH_NEURONX_ENABLE_ASYNC_NRT=1 at import when unset, and keeps a user's value."""
    check = Assumption(
        "async_default",
        f"{ASYNC_NRT_ENV}: torch-neuronx sets 1 at import when unset (documented default 0); a user's value stays",
    )
    unset = host.run(_async_after_import, env={ASYNC_NRT_ENV: None})
    users = host.run(_async_after_import, env={ASYNC_NRT_ENV: "0"})
    evidence = f"unset before import: {unset} after it (set by torch-neuronx); set to 0 by the user: {users} after it"
    if users != "0":
        fix = f"backend.async_runtime cannot take effect: torch-neuronx overrides {ASYNC_NRT_ENV} at import"
        return check.fails(evidence, fix, breaks_runner=True)
    if unset != "1":
        evidence = f"unset before import: {unset or 'still unset'} after it, so the documented default 0 applies"
        fix = f"nothing breaks: environment.json records {ASYNC_NRT_ENV} as it is; backend.async_runtime sets it"
        return check.fails(evidence, fix)
    return check.holds(evidence)


def _probe_inflight_removed(host: NeuronHost) -> Verdict:
    """Nothing sets the removed NEURON_RT_ASYNC_EXEC_MAX_INFLIGHT_REQUESTS, and the user's environment does not."""
    check = Assumption(
        "inflight_removed",
        f"{INFLIGHT_ENV} (removed in Neuron SDK 2.32) is set by neither torch-neuronx nor the runner",
    )
    at_import, after_backend = host.run(_inflight_after_import_and_backend, env={INFLIGHT_ENV: None})
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


def _probe_neff_cache_in_process(host: NeuronHost) -> Verdict:
    """TORCH_NEURONX_NEFF_CACHE_DIR set in-process before first use is the folder NEFFs go to."""
    check = Assumption(
        "neff_cache_in_process",
        f"{NEFF_CACHE_ENV} set in-process after torch-neuronx loaded, before first use, is honoured",
    )
    folder = host.folder("neff_cache_in_process")
    found = host.run(_neffs_with_cache_set_in_process, folder / "neff_cache", folder / "capture")
    evidence = f"{found['in_folder']} NEFF(s) in {folder / 'neff_cache'}; the capture holds {found['captured']}"
    fix = (
        f"measure.compile_cache sets {NEFF_CACHE_ENV} in-process: export it before starting python instead "
        "(its cold and warm counts read the wrong folder)"
    )
    return check.judge(bool(found["in_folder"]), evidence, fix, breaks_runner=True)


def _probe_process_group(host: NeuronHost) -> Verdict:
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


def _reported_lnc(timeout_s: float) -> tuple[str | None, str]:
    """The LNC `neuron-ls -j` reports (its devices' values), run with NEURON_LOGICAL_NC_CONFIG unset; else why none.

    The host's own setting (/opt/aws/neuron/logical_nc_config, SDK:deploy/eks/prerequisites.rst) can
    make the runtime's default differ from the generation's documented one, which the runner assumes.
    """
    tool = neuron_tool(_NEURON_LS)
    if tool is None:
        return None, f"{_NEURON_LS} is neither on PATH nor in {NEURON_BIN}"
    env = {name: value for name, value in os.environ.items() if name != LNC_ENV}
    try:
        done = subprocess.run([tool, "-j"], env=env, capture_output=True, text=True, timeout=timeout_s, check=True)
        values = {str(device["logical_neuroncore_config"]) for device in json.loads(done.stdout)}
    except (OSError, subprocess.SubprocessError, ValueError, TypeError, KeyError) as err:
        return None, f"{_NEURON_LS} -j gave none ({type(err).__name__}: {err})"
    return ", ".join(sorted(values)) or None, "no device listed"


def _probe_lnc(host: NeuronHost) -> Verdict:
    """The runtime's logical NeuronCores follow NEURON_LOGICAL_NC_CONFIG; unset, its LNC is the runner's default."""
    generation = trainium_generation()
    default, words = logical_nc_config(generation, {})
    check = Assumption(
        "lnc",
        f"{LNC_ENV}=1 gives a logical NeuronCore per physical one; unset, {generation}'s LNC is {words}, "
        f"as {_RUNTIME_LNC} reports",
    )
    unset = len(host.run(visible_cores, env={LNC_ENV: None, VISIBLE_CORES_ENV: None}))
    at_1 = len(host.run(visible_cores, env={LNC_ENV: "1", VISIBLE_CORES_ENV: None}))
    reported, why_none = _reported_lnc(host.timeout_s)
    evidence = f"{unset} logical NeuronCores with {LNC_ENV} unset, {at_1} with {LNC_ENV}=1; {_RUNTIME_LNC}: "
    evidence += reported or why_none
    if default is None:
        evidence += f"; the runtime's default reads as LNC {at_1 / unset:g}" if unset else ""
        return check.unknown(evidence, f"set {LNC_ENV} (1 or 2) for per-core peaks")
    _, mismatch = lnc_check((default, words), {_RUNTIME_LNC: reported})
    fix = f"per-core peaks and link classes take LNC {default} while {LNC_ENV} is unset: set it (1 or 2)"
    agrees = at_1 == unset * default and not mismatch
    return check.judge(agrees, "; ".join([evidence, *mismatch]), fix, breaks_runner=True)


# the Neuron caches a cache job moves: TorchNeuron's (NEFF, local NEFF, HLO) and torch-xla's
_NEURON_CACHES = [NeuronCompileCache.folders[name] for name in ("neff", "neff_local", "hlo", "neuron_compile_cache")]


def _probe_compile_caches(host: NeuronHost) -> Verdict:
    """A cold cache job compiles into its own folder, and the documented default caches gain nothing."""
    check = Assumption(
        "compile_caches",
        f"{', '.join(_NEURON_CACHES)}, set in-process as measure.compile_cache sets them, "
        f"move the caches a job fills; {', '.join(map(str, DEFAULT_CACHES))} gain nothing",
    )
    folder = host.folder("compile_caches")
    unset = dict.fromkeys(_NEURON_CACHES)
    found = host.run(_cold_cache_job, folder / "cache", folder / "capture", DEFAULT_CACHES, env=unset)
    gained = {path: count for path, count in found["gained"].items() if count}
    evidence = f"{found['in_folder']} NEFF(s) in the job's folder; the default caches gained {gained or 'nothing'}"
    fix = (
        "a cold job is partly warm and writes the user's cache: NeuronCompileCache.folders misses the "
        "variable that moves it (another process writing those caches meanwhile reads the same)"
    )
    return check.judge(bool(found["in_folder"]) and not gained, evidence, fix, breaks_runner=True)


# every probe with the verdicts it gives, in the order they run (cheap ones first)
_PROBES: tuple[tuple[tuple[str, ...], Callable[[NeuronHost], Verdict | list[Verdict]]], ...] = (
    (("neuron_config",), probe_neuron_config),
    (("profile_modes",), probe_profile_modes),
    (("correlate_device_time",), probe_correlate_device_time),
    (("runtime_not_started_by_queries",), _probe_runtime_not_started_by_queries),
    (("cores_reserved",), _probe_cores_reserved),
    (("contiguous_cores",), _probe_contiguous_cores),
    (("device_count_cached",), _probe_device_count_cached),
    (("async_default",), _probe_async_default),
    (("inflight_removed",), _probe_inflight_removed),
    (("neff_cache_in_process",), _probe_neff_cache_in_process),
    (("compile_caches",), _probe_compile_caches),
    (("lnc",), _probe_lnc),
    (("process_group",), _probe_process_group),
    (PROFILED_RUN_PROBES, probes_from_profiled_run),
    (("acc_events", "captures_per_cycle"), probes_from_repeated_schedule),
    (("capture_numbering",), probe_capture_numbering),
    (("dropped_events",), probe_dropped_events),
    (("first_execution",), probe_first_execution),
    (("neuron_monitor",), probe_neuron_monitor),
    (("memory_snapshot",), probe_memory_snapshot),
    (("cpu_fallbacks",), probe_cpu_fallbacks),
)
PROBE_NAMES = tuple(name for names, _ in _PROBES for name in names)


def neuron_verdicts(host: NeuronHost, report: Callable[[Verdict], None], only: set[str] | None = None) -> list[Verdict]:
    """The Neuron probes (those giving a verdict in `only`, when given); `report` sees each verdict as it comes."""
    verdicts: list[Verdict] = []
    for probe_names, probe in _PROBES:
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
