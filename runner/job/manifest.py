"""The environment manifest: software versions, device facts, how workers start, allow-listed variables.

Variables named like a secret are dropped even with an allowed prefix, the rest redacted: no credential reaches MLflow.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from runner import names
from runner.backends.base import Backend
from runner.backends.monitor import MonitorPlan
from runner.backends.registry import MANIFEST_ENV_PREFIXES, MANIFEST_PACKAGES, MANIFEST_SYSTEM_PACKAGES
from runner.config import RunSpec
from runner.execute.monitor import plan_monitor
from runner.execute.workers import worker_start
from runner.secrets import redact

ALLOWED_PREFIXES = (*MANIFEST_ENV_PREFIXES, "SLURM_JOB_ID", "SLURM_JOB_PARTITION", "SLURM_JOB_NODELIST", "SLURM_NTASKS")
_SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY", "AUTH", "COOKIE", "SESSION")
_PYTHON_PACKAGES = (*MANIFEST_PACKAGES, "hydra-core", "omegaconf", "mlflow")


def allowed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed variables, minus anything named like a credential."""
    return {
        name: redact(value)
        for name, value in sorted(environ.items())
        if name.startswith(ALLOWED_PREFIXES) and not any(marker in name.upper() for marker in _SECRET_MARKERS)
    }


def package_versions() -> dict[str, str | None]:
    """Installed versions of the Python packages that decide what a profile shows."""
    versions: dict[str, str | None] = {}
    for name in _PYTHON_PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def system_package_versions() -> dict[str, str | None]:
    """Versions of the devices' system packages (the Neuron runtime, tools and driver), from dpkg or rpm."""
    queries = (["dpkg-query", "-W", "-f", "${Version}"], ["rpm", "-q", "--qf", "%{VERSION}"])
    query = next((query for query in queries if shutil.which(query[0])), None)
    versions: dict[str, str | None] = {}
    for name in MANIFEST_SYSTEM_PACKAGES:
        done = subprocess.run([*query, name], capture_output=True, text=True) if query else None
        versions[name] = done.stdout.strip() if done is not None and done.returncode == 0 else None
    return versions


def _monitor_facts(plan: MonitorPlan | None, system_packages: Mapping[str, str | None]) -> dict[str, Any]:
    """What sampled the system series and how often; a monitor tool's version (neuron-monitor's) is its package's."""
    if plan is None:
        return {"period_s": None, "source": "off (monitor.period_s is null)"}
    facts = plan.facts()
    if plan.tool is not None:
        package, version = plan.tool.PACKAGE, system_packages.get(plan.tool.PACKAGE)
        facts["version"] = f"{package} {version}" if version else f"unknown: dpkg and rpm know no {package}"
    return facts


def build_manifest(
    backend: Backend, spec: RunSpec | None = None, environ: Mapping[str, str] = os.environ
) -> dict[str, Any]:
    """Everything needed to tell two runs' environments apart, safe to publish; with `spec`, its workers' too."""
    placement = backend.placement_facts(spec) if spec is not None else {}
    monitor = plan_monitor(spec.monitor, backend) if spec is not None else None
    workers = worker_start(environ)
    system_packages = system_package_versions()
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "system_packages": system_packages,
        "device": {**backend.manifest(), **placement},
        "workers": {"start_method": workers.method, "why": workers.why},
        "environment": allowed_environment(environ),
        names.MANIFEST_MONITOR: _monitor_facts(monitor, system_packages),
    }
