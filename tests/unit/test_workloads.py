"""Each RMSNorm variant matches the float64 reference."""

from __future__ import annotations

import pytest
import torch

from workloads.base import Workload
from workloads.rmsnorm import BuiltinRMSNorm, NaiveRMSNorm, RMSNorm

TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-12, torch.bfloat16: 2e-2, torch.float16: 2e-3}


@pytest.mark.parametrize("cls", [NaiveRMSNorm, BuiltinRMSNorm])
@pytest.mark.parametrize("dtype", list(TOLERANCE))
@pytest.mark.parametrize(("batch", "seq_len", "hidden"), [(1, 1, 8), (2, 3, 64), (4, 16, 33)])
def test_variant_matches_reference(
    cls: type[RMSNorm], dtype: torch.dtype, batch: int, seq_len: int, hidden: int
) -> None:
    module = cls(hidden=hidden, batch=batch, seq_len=seq_len).to(dtype)
    (x,) = module.example_inputs(dtype, torch.Generator().manual_seed(0))
    assert x.shape == (batch, seq_len, hidden) and x.dtype == dtype
    out = module(x)
    tol = TOLERANCE[dtype]
    torch.testing.assert_close(out.double(), module.reference(x), rtol=tol, atol=tol)


def test_variants_share_inputs_and_weight_for_one_seed() -> None:
    naive, builtin = NaiveRMSNorm(hidden=16, batch=2), BuiltinRMSNorm(hidden=16, batch=2)
    x1 = naive.example_inputs(torch.float32, torch.Generator().manual_seed(7))[0]
    x2 = builtin.example_inputs(torch.float32, torch.Generator().manual_seed(7))[0]
    assert torch.equal(x1, x2) and torch.equal(naive.weight, builtin.weight)


def test_weight_is_applied() -> None:
    module = NaiveRMSNorm(hidden=4)
    with torch.no_grad():
        module.weight.fill_(2.0)
    x = torch.ones(1, 1, 4)
    torch.testing.assert_close(module(x), torch.full((1, 1, 4), 2.0), rtol=1e-5, atol=1e-5)


def test_rmsnorm_satisfies_the_workload_protocol() -> None:
    assert isinstance(NaiveRMSNorm(hidden=4), Workload)
    assert not isinstance(torch.nn.Linear(2, 2), Workload)
