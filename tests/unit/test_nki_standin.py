"""The NKI stand-in keeps the documented rules a kernel must follow (tests/helpers/nki_standin/README.md)."""

from __future__ import annotations

import re
from types import ModuleType
from typing import Any

import pytest
import torch

from runner.backends.cores import LNC_ENV


@pytest.fixture
def nki(nki_standin: None, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The stand-in's `nki`, importable for one test, with the runtime's LNC unset."""
    monkeypatch.delenv(LNC_ENV, raising=False)
    import nki

    return nki


def programs(x: torch.Tensor) -> Any:
    """A kernel that stores each program's id and count in its own row of a shared output."""
    import nki.language as nl

    out = nl.ndarray((2, 2), dtype=torch.float32, buffer=nl.shared_hbm)
    row = nl.program_id(0)
    nl.store(out[row : row + 1, :], value=nl.add(nl.load(x), nl.num_programs(0) * 10 + row))
    return out


@pytest.mark.parametrize(("runtime", "launch"), [(None, 1), ("2", 1), ("1", 2)])
def test_a_launch_at_another_lnc_than_the_runtimes_fails_in_the_compilers_words(
    nki: ModuleType, monkeypatch: pytest.MonkeyPatch, runtime: str | None, launch: int
) -> None:
    if runtime is not None:
        monkeypatch.setenv(LNC_ENV, runtime)
    kernel = nki.jit(programs)
    expected = f"NKI kernel 'programs' is configured with LNC={launch}, but neuronx-cc is using LNC={runtime or 2}."
    with pytest.raises(RuntimeError, match=f"^{re.escape(expected)}$"):
        (kernel if launch == 1 else kernel[launch])(torch.zeros(1, 2))


@pytest.mark.parametrize("grid", [0, 8, (2, 1)])
def test_a_launch_grid_is_one_lnc_degree_of_1_or_2(nki: ModuleType, grid: object) -> None:
    with pytest.raises(ValueError, match="the launch grid is one LNC degree, 1 or 2"):
        nki.jit(programs)[grid]


def test_at_lnc_2_each_program_has_its_id_and_they_share_the_output(nki: ModuleType) -> None:
    out = nki.jit(programs)[2](torch.zeros(1, 2))
    assert out.tolist() == [[20.0, 20.0], [21.0, 21.0]]


def test_at_lnc_1_a_plain_call_runs_one_program_and_leaves_unstored_rows_nan(
    nki: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(LNC_ENV, "1")
    out = nki.jit(programs)(torch.zeros(1, 2))
    assert out[0].tolist() == [10.0, 10.0] and out[1].isnan().all()


def test_tiles_have_no_arithmetic_operators_the_language_does(nki: ModuleType) -> None:
    import nki.language as nl

    tile = nl.load(torch.ones(2, 2))
    for operate in (lambda: tile / 2, lambda: tile + 1.0, lambda: tile * tile):
        with pytest.raises(TypeError, match="unsupported operand"):
            operate()
    assert nl.divide(nl.add(tile, 1.0), 4).data.tolist() == [[0.5, 0.5], [0.5, 0.5]]
    with pytest.raises(TypeError, match=r"take tiles or scalars, got Tensor \(nl.load it into a tile\)"):
        nl.add(torch.ones(2, 2), tile)
