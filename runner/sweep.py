"""Sweep bookkeeping shared by every launcher: config hashes, jobs sharing a process, the end-of-sweep summary.

The summary is read from the jobs' status files, which `runner.job` writes.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from runner.config import ConfigError
from runner.job import STATUS_FILE, JobStatus, close_dead_job, read_status

if TYPE_CHECKING:
    from runner.backends.base import Backend

# Config keys that say where results go, how a sweep treats finished work and what is watched
# beside the measurement (the system series, so a run keeps the hash it had before `monitor`
# existed), not what a job measures: left out of the config hash. Every other key is in, cache
# folders too (a cold job's folder decides what a warm one finds).
UNHASHED_TOP = ("tracking", "resume", "monitor")
# the launcher that gives every job a process of its own
ISOLATED_LAUNCHER = "hydra/launcher=isolated"
# Hydra's default sweeper: the grid of the overrides' values, known before the first job
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def sweep_overrides(config: DictConfig) -> list[str]:
    """What the sweeper expands into jobs: hydra.sweeper.params, then the command line's overrides (which win)."""
    params = config.hydra.sweeper.get("params") or {}
    return [*(f"{key}={value}" for key, value in params.items()), *config.hydra.overrides.task]


def sweep_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in the order the basic sweeper launches them; None under another (it picks as it goes)."""
    if config.hydra.sweeper.get("_target_") != BASIC_SWEEPER:
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())
    overrides = parser.parse_overrides(sweep_overrides(config))
    return [list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def config_hash(resolved: dict[str, Any]) -> str:
    """A short hash of what a job measures: its resolved config without where results go."""
    identity = {k: v for k, v in resolved.items() if k not in UNHASHED_TOP}
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


def own_process_keys(backends: list[type[Backend]], swept: list[str], fixed: DictConfig) -> list[str]:
    """The keys for which this sweep's jobs cannot share one process on these backends.

    Those read once per process that the sweep varies, and those needing a fresh process that
    it varies or sets for every job (`fixed`: the sweep's config, swept keys at their defaults).
    A sweep that varies nothing is one job, which has its process to itself.
    """
    if not swept:
        return []
    keys = [key for cls in backends for key in cls.process_keys if key in swept]
    for cls in backends:
        keys += [key for key, (shared, _) in cls.fresh_process_keys.items()
                 if key in swept or OmegaConf.select(fixed, key) != shared]  # fmt: skip
    return list(dict.fromkeys(keys))


class SharedProcess:
    """What the jobs measured so far in this process fixed for every later job in it.

    Under Hydra's basic launcher a sweep's jobs share one process, and the device runtime
    reads its process-level settings once: a later job that changes one would run on the
    first job's values while its manifest names its own. Such a job is refused.
    """

    def __init__(self) -> None:
        # the first job measured here, by name
        self.first_job: str | None = None
        # per backend: the first job that ran on it, and its values of the backend's process-level keys
        self.held: dict[str, tuple[str, dict[str, Any]]] = {}

    @contextmanager
    def job(self, backend: str, config: dict[str, Any], name: str) -> Iterator[None]:
        """Refuse a job this process cannot run as its config says; record what it fixed once it tried.

        A job counts as measured whatever its outcome: it may have started the runtime before it failed.

        Raises:
            ConfigError: naming the key and the launcher that gives each job its own process.
        """
        if self.first_job is not None:
            self._refuse_change(_backend_class(backend), config)
        try:
            yield
        finally:
            with suppress(ConfigError):  # a device that is not here measured nothing
                cls = _backend_class(backend)
                self.first_job = self.first_job or name
                self.held.setdefault(cls.name, (name, {key: _value(config, key) for key in cls.process_keys}))

    def _refuse_change(self, cls: type[Backend], config: dict[str, Any]) -> None:
        for key, (shared, why) in cls.fresh_process_keys.items():
            if (value := _value(config, key)) != shared:
                raise ConfigError(
                    f"{key}={value} needs a process no job has measured in ({why}), and this process ran "
                    f"'{self.first_job}' already: run the sweep with {ISOLATED_LAUNCHER} (a fresh process per job)"
                )
        first, held = self.held.get(cls.name, ("", {}))
        for key, why in cls.process_keys.items():
            if key in held and (value := _value(config, key)) != held[key]:
                raise ConfigError(
                    f"{key}={value}: this process ran '{first}' with {key}={held[key]} already and "
                    f"{why}: run the sweep with {ISOLATED_LAUNCHER} (a fresh process per job)"
                )


def _backend_class(name: str) -> type[Backend]:
    """The backend `backend.name` selects; imported here, as it loads torch (the sweep's summary must not)."""
    from runner.backends.registry import backend_class

    return backend_class(name)


def _value(config: dict[str, Any], key: str) -> Any:
    """A dotted key's value in a resolved config; None where the config lacks it."""
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


# the jobs of this process: one, unless a launcher runs several in it
THIS_PROCESS = SharedProcess()


@dataclass
class SweepSummary:
    """What became of each job of a sweep."""

    finished: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    # stopped by SIGINT/SIGTERM (the sweep's own stop, or a signal to the job alone)
    killed: list[str] = field(default_factory=list)
    # the FINISHED runs that skipped jobs found: the comparison shows them, marked reused
    reused_run_ids: list[str] = field(default_factory=list)
    # the sweep's jobs, started or not (None when its sweeper does not say up front)
    planned: int | None = None

    @property
    def total(self) -> int:
        """Jobs of the sweep, whatever became of them, those a stop kept from starting too."""
        return max(self.planned or 0, self.started)

    @property
    def started(self) -> int:
        """Jobs that ran or were skipped: those with a status."""
        return len(self.finished) + len(self.skipped) + len(self.failed) + len(self.killed)

    def lines(self) -> list[str]:
        """The summary printed at the end of a sweep."""
        lines = [
            f"sweep: {self.total} job(s): {len(self.finished)} finished, {len(self.skipped)} skipped "
            f"(already FINISHED), {len(self.failed)} failed"
            + (f", {len(self.killed)} killed" if self.killed else "")
            + (f", {self.total - self.started} not run" if self.total > self.started else "")
        ]
        lines += [f"  skipped: {name}" for name in self.skipped]
        lines += [f"  FAILED:  {name}" for name in self.failed]
        lines += [f"  KILLED:  {name}" for name in self.killed]
        return lines


def summarise_sweep(sweep_dir: Path, sweep_id: str, uri: str | None, planned: int | None = None) -> SweepSummary:
    """Read the status of this sweep's `planned` jobs; those still RUNNING died, and their runs are marked FAILED."""
    summary = SweepSummary(planned=planned)
    for path in sorted(sweep_dir.glob(f"*/{STATUS_FILE}"), key=lambda p: p.parent.name):
        job_dir = path.parent
        if (read_status(job_dir) or {}).get("sweep_id") != sweep_id:
            continue
        if (read_status(job_dir) or {}).get("status") == JobStatus.RUNNING:
            close_dead_job(job_dir, "died without finishing its run (killed, crashed or out of memory)", uri)
        status = read_status(job_dir) or {}
        name = f"{job_dir.name} [{status.get('overrides', '')}]"
        if status.get("status") == JobStatus.FINISHED:
            summary.finished.append(name)
        elif status.get("status") == JobStatus.SKIPPED:
            summary.skipped.append(f"{name} -> run {status.get('run_id')}")
            summary.reused_run_ids.append(str(status.get("run_id")))
        elif status.get("status") == JobStatus.KILLED:
            summary.killed.append(f"{name}: {status.get('error', 'interrupted')}")
        else:
            summary.failed.append(f"{name}: {status.get('error', 'no error recorded')}")
    return summary
