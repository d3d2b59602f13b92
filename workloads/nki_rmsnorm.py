"""RMSNorm as an NKI kernel (`@nki.jit`): the RMSNorm study's inputs, weight and float64 reference.

NKI comes as the `nki` package, which torch-neuronx 2.14 imports (DOCS-latest
torch/get-started/quickstart-nki-kernel; `SDK:nki/examples/getting_started_torch.py`), or as
`neuronxcc.nki` in SDKs up to 2.26 (their `nki/examples/rmsnorm` tutorial). A kernel called on
`neuron` tensors in eager mode compiles on its first call (DOCS-latest torch/guides/how-to-work-with-nki).
It launches as `kernel[lnc](...)` at the runtime's LNC, which the runner passes in: a plain `kernel(...)`
launches at LNC 1 and fails where the runtime's is 2, Trn2's default (`SDK:nki/api/nki/__init__.py`, `jit`).
Written against `SDK:nki/api/nki/language/__init__.py` (2.32) and not yet run on Trainium.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch

from workloads.rmsnorm import RMSNorm

# the NKI packages, newest first
NKI_MODULES = ("nki", "neuronxcc.nki")


def rmsnorm_kernel(eps: float) -> Any:
    """The kernel over (rows, hidden), rows a multiple of 128, with the weight as (1, hidden).

    Raises:
        ImportError: neither NKI package is installed; the message names both.
    """
    for name in NKI_MODULES:
        try:
            nki, nl = importlib.import_module(name), importlib.import_module(f"{name}.language")
            break
        except ImportError:
            continue
    else:
        raise ImportError(
            f"workload._target_={__name__}.NkiRMSNorm needs NKI: neither {' nor '.join(NKI_MODULES)} "
            "is installed here (it comes with torch-neuronx and neuronx-cc on a Trainium host)"
        )

    def rmsnorm(x: Any, weight: Any) -> Any:
        rows, hidden = x.shape
        tile = nl.tile_size.pmax  # a tile spans at most 128 partitions, one row each
        tiles, programs, program = rows // tile, nl.num_programs(0), nl.program_id(0)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)  # shared by the LNC's cores
        scale = nl.broadcast_to(nl.load(weight), (tile, hidden))
        # each program (one per physical core) takes a contiguous run of tiles; on LNC 2 an odd count
        # leaves the second one tile more (DOCS-latest nki/get-started/about/lnc, program_id)
        for i in nl.affine_range(program * tiles // programs, (program + 1) * tiles // programs):
            block = nl.load(x[i * tile : (i + 1) * tile, :])
            # NKI tiles have no arithmetic operators: nl.divide and nl.add, not / and +
            mean_square = nl.divide(nl.sum(nl.square(block), axis=1, keepdims=True), hidden)
            normed = nl.multiply(block, nl.rsqrt(nl.add(mean_square, eps)))
            nl.store(out[i * tile : (i + 1) * tile, :], value=nl.multiply(normed, scale))
        return out

    return nki.jit(rmsnorm)  # @nki.jit, applied where the module was found


class NkiRMSNorm(RMSNorm):
    """The RMSNorm variants' module, its forward one NKI kernel launch at the runtime's LNC."""

    # rows a kernel tile holds: NKI's partition dimension (nl.tile_size.pmax)
    TILE_ROWS = 128

    def __init__(self, hidden: int, batch: int = 1, seq_len: int = 1, eps: float = 1e-6) -> None:
        super().__init__(hidden, batch, seq_len, eps)
        self.kernel = rmsnorm_kernel(eps)
        if (batch * seq_len) % self.TILE_ROWS:
            raise ValueError(f"workload.seq_len: batch * seq_len must be a multiple of {self.TILE_ROWS}")
        # physical NeuronCores per logical one, which the runner sets (launch_at_lnc); no guess of 1
        self.lnc: int | None = None

    def launch_at_lnc(self, lnc: int) -> None:
        """Launch the kernel at the runtime's LNC, one program per physical core (workloads.base.LncKernels)."""
        self.lnc = lnc

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise every token vector in the kernel: x as (rows, hidden), the weight as one row."""
        if self.lnc is None:
            raise RuntimeError("NkiRMSNorm: launch_at_lnc(the runtime's LNC) must come before the first call")
        normed: torch.Tensor = self.kernel[self.lnc](x.reshape(-1, self.hidden), self.weight.reshape(1, -1))
        return normed.reshape(x.shape)
