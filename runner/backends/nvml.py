"""NVML (nvidia-ml-py), the CUDA backend's system monitor: the job's GPU's utilisation, memory and power."""

from __future__ import annotations

from importlib import metadata

import torch

from runner import names
from runner.backends.monitor import MonitorPlan, Reader

_NVML_PACKAGE = "nvidia-ml-py"


def nvml_plan(period_s: int) -> MonitorPlan:
    """NVML beside the host, probed (NVML starts, nothing samples); the host alone where NVML is not usable."""
    try:
        return MonitorPlan("nvml", period_s, _nvml_version(), device_reader=_nvml_reader)
    except (ImportError, RuntimeError) as err:
        return MonitorPlan("host", period_s, missing=f"NVML is not usable ({err}): only the host is sampled")


def _nvml_version() -> str:
    """nvidia-ml-py's version and the driver's, starting NVML.

    Raises:
        ImportError: nvidia-ml-py is not installed.
        RuntimeError: NVML does not start (no driver).
    """
    try:
        import pynvml
    except ImportError:
        raise ImportError(f"{_NVML_PACKAGE} is not installed: pip install {_NVML_PACKAGE}") from None
    try:
        pynvml.nvmlInit()
        driver = pynvml.nvmlSystemGetDriverVersion()
    except pynvml.NVMLError as err:
        raise RuntimeError(f"NVML does not start: {err}") from None
    try:
        package = f"{_NVML_PACKAGE} {metadata.version(_NVML_PACKAGE)}"
    except metadata.PackageNotFoundError:  # pynvml from another distribution
        package = "pynvml"
    return f"{package}, driver {driver}"


def gpu_values(utilization_pct: float, memory_used_bytes: float, power_mw: float) -> dict[str, float]:
    """NVML's readings of the job's GPU as metric values (NVML gives power in milliwatts)."""
    return {
        names.SYSTEM_GPU_UTILIZATION_PCT: float(utilization_pct),
        names.SYSTEM_GPU_MEMORY_USED_BYTES: float(memory_used_bytes),
        names.SYSTEM_GPU_POWER_W: power_mw / 1000,
    }


def _nvml_reader(device: torch.device) -> Reader:
    """A reader of the job's GPU, found by the UUID torch gives its device (NVML numbers GPUs its own way).

    Raises:
        RuntimeError: NVML has no handle for that GPU.
    """
    try:
        import pynvml

        uuid = str(torch.cuda.get_device_properties(device).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception as err:  # noqa: BLE001  (whatever torch or NVML raise, the job's GPU has no handle)
        raise RuntimeError(f"NVML has no handle for this job's GPU ({err})") from None

    def read() -> dict[str, float]:
        return gpu_values(
            pynvml.nvmlDeviceGetUtilizationRates(handle).gpu,
            pynvml.nvmlDeviceGetMemoryInfo(handle).used,
            pynvml.nvmlDeviceGetPowerUsage(handle),
        )

    return read
