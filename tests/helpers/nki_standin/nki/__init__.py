"""Stand-in for NKI's `nki` package (see ../README.md): `jit` gives a kernel launched as `kernel(...)` or
`kernel[lnc](...)`, which runs its programs one after another as Python on torch CPU tensors."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from nki import language

LNC_ENV = "NEURON_LOGICAL_NC_CONFIG"
# neuronx-cc's LNC with the variable unset: 2 "on Trn2 and later" (DOCS-latest compiler/error-codes/EVRF066),
# the platform this stand-in plays
DEFAULT_LNC = 2
# "an LNC degree ... of either 1 or 2" (DOCS-latest nki/get-started/about/lnc); more is an error
LNC_DEGREES = (1, 2)


class Kernel:
    """A `@nki.jit` kernel: `kernel(...)` launches at LNC 1, `kernel[lnc](...)` at lnc (SDK:nki/api/nki/__init__.py)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn

    def __call__(self, *args: Any) -> Any:
        return self[1](*args)  # "The default is LNC=1"

    def __getitem__(self, lnc: object) -> Callable[..., Any]:
        if lnc not in LNC_DEGREES or isinstance(lnc, bool):
            raise ValueError(f"kernel[{lnc!r}]: the launch grid is one LNC degree, 1 or 2")
        return functools.partial(self._launch, lnc)

    def _launch(self, lnc: int, *args: Any) -> Any:
        """Refuse an LNC other than neuronx-cc's and the runtime's, in EVRF066's words; else run the programs."""
        runtime = int(os.environ.get(LNC_ENV) or DEFAULT_LNC)
        if lnc != runtime:
            raise RuntimeError(
                f"NKI kernel '{self.fn.__name__}' is configured with LNC={lnc}, but neuronx-cc is using LNC={runtime}."
            )
        return language.launch(self.fn, lnc, args)


def jit(fn: Callable[..., Any]) -> Kernel:
    return Kernel(fn)
