"""The user-facing errors: below the config, the backends and the callbacks, so every layer can raise them."""

from __future__ import annotations

from hydra.errors import CompactHydraException


class ConfigError(ValueError):
    """A user-facing configuration mistake; the message names the key and the allowed values."""


# Hydra's compact exceptions, so `python -m runner` (and Hydra) print them as one line, no traceback
class UsageError(CompactHydraException):
    """Bad input: one line on stderr, a non-zero exit, and no job folder left behind."""


class JobFailure(CompactHydraException):
    """A single job that failed: one line on stderr naming its error.txt, a non-zero exit."""
