"""The user's environment as the runner started, before `import torch` loads a device extension (torch-free).

PyTorch autoloads torch-neuronx at `import torch`, which sets `TORCH_NEURONX_ENABLE_ASYNC_NRT=1` when
unset; so the runner's entry records which variables the user left unset, for the processes it starts.
"""

from __future__ import annotations

import os

ASYNC_NRT_ENV = "TORCH_NEURONX_ENABLE_ASYNC_NRT"
# variables an autoloaded device extension sets at `import torch` when unset
_SET_AT_TORCH_IMPORT = (ASYNC_NRT_ENV,)
# which of them the user left unset, comma-separated, as the runner's entry found them
_UNSET_BY_USER_ENV = "RUNNER_UNSET_BEFORE_TORCH"


def record_user_environment() -> None:
    """Note which variables of `_SET_AT_TORCH_IMPORT` the user left unset; call it before torch loads."""
    os.environ[_UNSET_BY_USER_ENV] = ",".join(name for name in _SET_AT_TORCH_IMPORT if name not in os.environ)


def set_by_user(name: str) -> bool:
    """Whether the user's environment set `name`, rather than a package at `import torch` (no record: as it is now)."""
    recorded = os.environ.get(_UNSET_BY_USER_ENV)
    return name in os.environ and (recorded is None or name not in recorded.split(","))
