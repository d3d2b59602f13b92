"""The host table: versions, usable backends, Slurm and the CPU calibration, on any machine.

Which backends are usable is asked in a fresh process: asking torch-neuronx may (that is
one of the probes) start the Neuron runtime, which would then hold the cores the probes need.
"""

from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from pathlib import Path

import torch

from runner.backends.neuron import DRIVER_VERSION, instance_type
from runner.backends.peaks import cached_here, calibrate_cpu, cpu_peak, keep_best_calibration, threads_words
from runner.backends.registry import BACKEND_CLASSES, backend_class
from runner.job.manifest import package_versions, system_package_versions
from runner.secrets import redact

# a fresh calibration this far from the cached one means the cache no longer describes the host
_CALIBRATION_DRIFT = 0.25


def usable_backends() -> tuple[list[str], str]:
    """The backends whose device this process sees, and what backend=auto resolves to."""
    return [cls.traits.name for cls in BACKEND_CLASSES if cls.available()], backend_class("auto").traits.name


def _command(*argv: str) -> tuple[bool, str]:
    """Whether a command succeeded, with its first output line (or its last error line)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError) as err:
        return False, str(err)
    text = done.stdout.strip().splitlines() if done.returncode == 0 else done.stderr.strip().splitlines()[-1:]
    return done.returncode == 0, (text or [""])[0]


def _cuda() -> str:
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU build of torch"
        return f"no GPU visible ({build})"
    gpus = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    found, driver = _command("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    return f"{gpus}; CUDA {torch.version.cuda}; driver {driver if found else 'unknown (nvidia-smi failed)'}"


def _neuron() -> str:
    try:
        driver = DRIVER_VERSION.read_text().strip()
    except OSError:
        return "no Neuron driver loaded (/sys/module/neuron absent)"
    packages = ", ".join(f"{k} {v}" for k, v in system_package_versions().items() if v) or "no aws-neuronx packages"
    return f"instance {instance_type() or 'unknown'}; driver {driver}; {packages}"


def _slurm() -> str:
    if shutil.which("sinfo") is None:
        return "not installed (hydra/launcher=slurm unavailable)"
    answered, partitions = _command("sinfo", "-h", "-o", "%P")
    if not answered:
        return f"installed, but the controller does not answer: {partitions}"
    return f"controller answers; partitions {' '.join(partitions.split()) or 'none'}"


def _calibrations() -> list[tuple[str, str]]:
    """A row per CPU calibration cached here, and one for the doctor's own thread count.

    Each thread count has its own entry: jobs' one-thread workers read one the doctor's own threads never measure.
    """
    own = torch.get_num_threads()
    try:
        return [_calibration(threads, dtype) for threads, dtype in sorted({*cached_here(), (own, "float32")})]
    finally:
        torch.set_num_threads(own)


def _calibration(threads: int, dtype: str) -> tuple[str, str]:
    """The cached calibration at `threads` against one measured now, the cache keeping the better of the two.

    A cache measured on a busy host reads low and inflates roofline fractions.
    """
    torch.set_num_threads(threads)
    label = f"cpu calibration, {threads_words(threads)}, {dtype}"
    if (threads, dtype) not in cached_here():  # measured once, here: no cached figure to call it
        bandwidth, gflops = keep_best_calibration(dtype, *calibrate_cpu(dtype))
        return label, f"measured now {bandwidth:.1f} GB/s copy, {gflops:.1f} GFLOP/s {dtype} matmul (none was cached)"
    cached = cpu_peak(dtype)
    bandwidth, gflops = calibrate_cpu(dtype)
    line = (
        f"cached {cached.bandwidth_gbps:.1f} GB/s copy, {cached.gflops:.1f} GFLOP/s {dtype} matmul; "
        f"now {bandwidth:.1f} GB/s, {gflops:.1f} GFLOP/s"
    )
    ratios = (bandwidth / cached.bandwidth_gbps, gflops / cached.gflops)
    if max(ratios) > 1 + _CALIBRATION_DRIFT:
        keep_best_calibration(dtype, bandwidth, gflops)
        line += "; the cache read low (measured on a busy host?) and now keeps the better figures"
    elif min(ratios) < 1 - _CALIBRATION_DRIFT:
        line += "; this host is busier now than when the cache was measured: timings here will be noisy"
    return label, line


def host_rows(backends: tuple[list[str], str] | str, store_uri: str) -> list[tuple[str, str]]:
    """The host table, row by row: (item, value)."""
    versions = package_versions()
    usable = backends if isinstance(backends, str) else f"{', '.join(backends[0])}; backend=auto picks {backends[1]}"
    return [
        ("host", f"{platform.node()} ({platform.platform()})"),
        ("python", sys.version.split()[0]),
        *((name, version or "not installed") for name, version in versions.items()),
        ("cuda", _cuda()),
        ("neuron", _neuron()),
        ("backends usable", usable),
        ("mlflow store", redact(store_uri)),
        ("slurm", _slurm()),
        *_calibrations(),
        ("working directory", str(Path.cwd())),
    ]
