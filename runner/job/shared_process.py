"""Jobs sharing one process (Hydra's basic launcher): which keys a process fixes for every later job in it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

from runner.config import ConfigError

if TYPE_CHECKING:
    from runner.backends.base import Backend

ISOLATED_LAUNCHER = "hydra/launcher=isolated"  # the launcher that gives every job a process of its own


def own_process_keys(backends: list[type[Backend]], swept: list[str], fixed: DictConfig) -> list[str]:
    """The keys for which this sweep's jobs cannot share one process on these backends.

    Those read once per process that it varies, and those needing a fresh process that it varies or sets for
    every job (`fixed`: the sweep's config, swept keys at their defaults).
    """
    if not swept:  # a sweep that varies nothing is one job, which has its process to itself
        return []
    keys = [key for cls in backends for key in cls.traits.process_keys if key in swept]
    for cls in backends:
        keys += [key for key, (shared, _) in cls.traits.fresh_process_keys.items()
                 if key in swept or OmegaConf.select(fixed, key) != shared]  # fmt: skip
    return list(dict.fromkeys(keys))


class SharedProcess:
    """What the jobs measured so far in this process fixed for every later job in it.

    The device runtime reads its process-level settings once: a later job that changed one would run on the
    first job's values while its manifest names its own.
    """

    def __init__(self) -> None:
        self.first_job: str | None = None
        # per backend: the first job that ran on it, and its values of the backend's process-level keys
        self.held: dict[str, tuple[str, dict[str, Any]]] = {}

    @contextmanager
    def job(self, backend: str, config: dict[str, Any], name: str) -> Iterator[None]:
        """Refuse (ConfigError) a job this process cannot run as its config says; record what it fixed once it tried.

        A job counts as measured whatever its outcome: it may have started the runtime before it failed.
        """
        if self.first_job is not None:
            self._refuse_change(_backend_class(backend), config)
        try:
            yield
        finally:
            with suppress(ConfigError):  # a device that is not here measured nothing
                cls = _backend_class(backend)
                self.first_job = self.first_job or name
                self.held.setdefault(
                    cls.traits.name, (name, {key: _value(config, key) for key in cls.traits.process_keys})
                )

    def _refuse_change(self, cls: type[Backend], config: dict[str, Any]) -> None:
        for key, (shared, why) in cls.traits.fresh_process_keys.items():
            if (value := _value(config, key)) != shared:
                raise ConfigError(
                    f"{key}={value} needs a process no job has measured in ({why}), and this process ran "
                    f"'{self.first_job}' already: run the sweep with {ISOLATED_LAUNCHER} (a fresh process per job)"
                )
        first, held = self.held.get(cls.traits.name, ("", {}))
        for key, why in cls.traits.process_keys.items():
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


THIS_PROCESS = SharedProcess()  # the jobs of this process: one, unless a launcher runs several in it
