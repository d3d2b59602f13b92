"""Stand-in for `nki.language` (see ../README.md): HBM tensors are torch CPU tensors, on-chip tiles are `Tile`s."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

shared_hbm = "shared_hbm"
sbuf = "sbuf"


class tile_size:  # noqa: N801  (NKI's name)
    pmax = 128  # partitions of on-chip memory: a tile's first dimension at most


class Tile:
    """A tile in on-chip memory. NKI's tensors have views and no arithmetic operators (`NkiTensor`,
    SDK:nki/api/nki/language/__init__.py): `tile / n` or `tile + eps` raise TypeError, nl.divide and nl.add work."""

    __slots__ = ("data",)

    def __init__(self, data: torch.Tensor) -> None:
        if data.dim() and data.shape[0] > tile_size.pmax:
            raise ValueError(f"a tile spans at most {tile_size.pmax} partitions, got {data.shape[0]}")
        self.data = data

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)


@dataclass
class Launch:
    """One kernel launch: its programs, the one running, and the shared_hbm tensors all its programs see."""

    programs: int
    program: int = 0
    shared: list[torch.Tensor] = field(default_factory=list)
    # shared_hbm tensors the running program has asked for: its k-th is every program's k-th
    allocated: int = 0


_launch: Launch | None = None


def launch(kernel: Callable[..., Any], programs: int, args: tuple[Any, ...]) -> Any:
    """Run a launch's programs in turn, each with its own program_id (NKI's simulator runs them as threads)."""
    global _launch
    _launch = state = Launch(programs)
    try:
        results = []
        for program in range(programs):
            state.program, state.allocated = program, 0
            results.append(kernel(*args))
        return results[0]
    finally:
        _launch = None


def _running() -> Launch:
    if _launch is None:
        raise RuntimeError("NKI language calls run inside a kernel launch")
    return _launch


def program_id(axis: int = 0) -> int:
    if axis != 0:
        raise ValueError(f"kernel[lnc] launches a one-axis grid; program_id(axis={axis}) has no axis")
    return _running().program


def num_programs(axes: int = 0) -> int:
    if axes != 0:
        raise ValueError(f"kernel[lnc] launches a one-axis grid; num_programs(axes={axes}) has no axis")
    return _running().programs


def ndarray(shape: tuple[int, ...], dtype: torch.dtype, buffer: str = sbuf, name: str = "") -> torch.Tensor:
    """A shared_hbm tensor, one per launch, NaN-filled as in NKI's simulator: rows no program stored show."""
    if buffer != shared_hbm:
        raise ValueError(f"the stand-in allocates only shared_hbm tensors, got buffer={buffer!r}")
    state = _running()
    if state.allocated == len(state.shared):
        state.shared.append(torch.full(shape, float("nan") if dtype.is_floating_point else 4, dtype=dtype))
    tensor = state.shared[state.allocated]
    state.allocated += 1
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"program {state.program} allocated {tuple(shape)} where program 0 allocated {tensor.shape}")
    return tensor


def load(src: torch.Tensor, dtype: torch.dtype | None = None) -> Tile:
    return Tile(src.to(dtype or src.dtype, copy=True))


def store(dst: torch.Tensor, value: Tile) -> None:
    dst.copy_(_value(value))


def affine_range(start: int, stop: int | None = None, step: int = 1) -> range:
    return range(start, stop, step) if stop is not None else range(start)


def _value(x: Tile | float) -> torch.Tensor | float:
    """A tile's data or a scalar: an HBM tensor must be loaded into a tile first."""
    if isinstance(x, Tile):
        return x.data
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return x
    raise TypeError(f"NKI operations take tiles or scalars, got {type(x).__name__} (nl.load it into a tile)")


def broadcast_to(x: Tile, shape: tuple[int, ...]) -> Tile:
    return Tile(x.data.expand(shape))


def sum(x: Tile, axis: int, dtype: Any = None, keepdims: bool = False) -> Tile:  # noqa: A001
    return Tile(torch.sum(x.data, dim=axis, keepdim=keepdims))


def _elementwise(op: Callable[..., Any], *operands: Tile | float) -> Tile:
    if not any(isinstance(x, Tile) for x in operands):
        raise TypeError("an NKI element-wise operation takes at least one tile")
    return Tile(op(*(_value(x) for x in operands)))


def add(x: Tile | float, y: Tile | float, dtype: Any = None) -> Tile:
    return _elementwise(operator.add, x, y)


def divide(x: Tile | float, y: Tile | float, dtype: Any = None) -> Tile:
    return _elementwise(operator.truediv, x, y)


def multiply(x: Tile | float, y: Tile | float, dtype: Any = None) -> Tile:
    return _elementwise(operator.mul, x, y)


def square(x: Tile, dtype: Any = None) -> Tile:
    return _elementwise(torch.square, x)


def rsqrt(x: Tile, dtype: Any = None) -> Tile:
    return _elementwise(torch.rsqrt, x)
