"""Stand-in for `nki.language` (see ../README.md): tiles are torch tensors of at most 128 partitions."""

from __future__ import annotations

from typing import Any

import torch

shared_hbm = "shared_hbm"


class tile_size:  # noqa: N801  (NKI's name)
    pmax = 128  # partitions of on-chip memory: a tile's first dimension at most


def ndarray(shape: tuple[int, ...], dtype: torch.dtype, buffer: str = "sbuf") -> torch.Tensor:
    return torch.empty(shape, dtype=dtype)


def load(src: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    if src.shape[0] > tile_size.pmax:
        raise ValueError(f"a tile spans at most {tile_size.pmax} partitions, got {src.shape[0]}")
    return src.to(dtype or src.dtype, copy=True)


def store(dst: torch.Tensor, value: torch.Tensor) -> None:
    dst.copy_(value)


def affine_range(stop: int) -> range:
    return range(stop)


def broadcast_to(x: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    return x.expand(shape)


def sum(x: torch.Tensor, axis: int, dtype: Any = None, keepdims: bool = False) -> torch.Tensor:  # noqa: A001
    return torch.sum(x, dim=axis, keepdim=keepdims)


def square(x: torch.Tensor) -> torch.Tensor:
    return x * x


def rsqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x)


def multiply(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return x * y
