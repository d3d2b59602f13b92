"""The backends by name; `backend=auto` resolves here, once, for jobs and launchers (neuron, then cuda, then cpu)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from omegaconf import OmegaConf

from runner.backends.base import Backend, Slot
from runner.backends.cpu import CpuBackend
from runner.backends.cuda import CudaBackend
from runner.backends.neuron import NeuronBackend
from runner.config import BACKENDS, BackendConfig, ConfigError

# in the order backend=auto tries them
BACKEND_CLASSES: tuple[type[Backend], ...] = (NeuronBackend, CudaBackend, CpuBackend)


def _every_device(values: Callable[[type[Backend]], tuple[str, ...]]) -> tuple[str, ...]:
    """Each device's values, the host CPU's first, once each."""
    return tuple(dict.fromkeys(value for cls in reversed(BACKEND_CLASSES) for value in values(cls)))


# Every device's, whichever runs the job: two jobs' manifests then compare key for key.
MANIFEST_ENV_PREFIXES = _every_device(lambda cls: cls.traits.manifest_env_prefixes)
MANIFEST_PACKAGES = _every_device(lambda cls: cls.traits.manifest_packages)
MANIFEST_SYSTEM_PACKAGES = _every_device(lambda cls: cls.traits.manifest_system_packages)
# Every device's compile cache: they are moved before the device is chosen (choosing it loads its libraries).
COMPILE_CACHES = tuple(dict.fromkeys(cls.compile_cache for cls in BACKEND_CLASSES))


def backend_class(name: str) -> type[Backend]:
    """The class `backend.name` selects, `auto` resolved to the first available device.

    Raises:
        ConfigError: the named device is not available on this machine.
    """
    if name == "auto":
        return next(cls for cls in BACKEND_CLASSES if cls.available())
    by_name = {cls.traits.name: cls for cls in BACKEND_CLASSES}
    if name not in by_name:
        raise ConfigError(f"backend.name={name!r} is not allowed; choose one of: {', '.join(BACKENDS)}")
    cls = by_name[name]
    if cls is not NeuronBackend and not cls.available():  # NeuronBackend says why itself
        usable = ", ".join(["auto", *(c.traits.name for c in BACKEND_CLASSES if c.available())])
        raise ConfigError(f"backend={name}: no {name} device is visible (allowed here: {usable})")
    return cls


def make_backend(config: BackendConfig) -> Backend:
    """Build the backend named by `backend.name` (the Neuron keys exist only in backend=neuron's schema).

    Raises:
        ConfigError: the requested device is not available on this machine.
    """
    return backend_class(config.name)(config)


def launcher_slots(backend: Any, jobs: int, pool: str | None, cores_per_job: int) -> list[Slot]:
    """The shares of the machine the parallel launcher runs `jobs` jobs in, planned by the sweep's backend config.

    Raises:
        ConfigError: the machine cannot be shared so; the message names the key.
    """
    config: BackendConfig = OmegaConf.to_object(backend)  # type: ignore[assignment]
    return backend_class(config.name).plan_slots(config, jobs, pool, cores_per_job)
