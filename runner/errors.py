"""The user-facing error every layer raises: below the config and the backends, so both can."""

from __future__ import annotations


class ConfigError(ValueError):
    """A user-facing configuration mistake; the message names the key and the allowed values."""
