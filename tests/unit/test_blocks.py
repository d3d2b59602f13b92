"""Every workload against its float64 reference, in forward and train_step mode; cost models by hand."""

from __future__ import annotations

import math

import pytest
import torch

from runner.backends.cpu import CpuBackend
from runner.compose import compose_config
from runner.config import BackendConfig
from runner.config_loading import load_run_spec
from runner.measure.build import build_workload
from workloads.blocks import MatMul, NaiveAttention, NaiveLayerNorm, NaiveSoftmax, SwiGLU
from workloads.llama import DecoderLayer, DecoderStack

# tiny shapes per workload option, so both modes run in well under a second each
TINY = {
    "rmsnorm_naive": ["workload.hidden=16", "workload.seq_len=4"],
    "rmsnorm_builtin": ["workload.hidden=16", "workload.seq_len=4"],
    "layernorm_naive": ["workload.hidden=16", "workload.seq_len=4"],
    "layernorm_builtin": ["workload.hidden=16", "workload.seq_len=4"],
    "softmax_naive": ["workload.hidden=16", "workload.seq_len=4"],
    "softmax_builtin": ["workload.hidden=16", "workload.seq_len=4"],
    "matmul": ["workload.m=8", "workload.n=12", "workload.k=16"],
    "attention_naive": ["workload.seq_len=8", "workload.heads=2", "workload.head_dim=8"],
    "attention_sdpa": ["workload.seq_len=8", "workload.heads=2", "workload.head_dim=8"],
    "swiglu": ["workload.hidden=16", "workload.intermediate=24", "workload.seq_len=4"],
    "decoder_layer": ["workload.hidden=16", "workload.heads=2", "workload.intermediate=24", "workload.seq_len=6"],
    "decoder_stack": ["workload.hidden=16", "workload.heads=2", "workload.intermediate=24", "workload.seq_len=6"],
}


@pytest.mark.parametrize("mode", ["forward", "train_step"])
@pytest.mark.parametrize("workload", sorted(TINY))
def test_workload_matches_its_reference(workload: str, mode: str) -> None:
    cfg = compose_config(f"+workload={workload}", "backend=cpu", *TINY[workload], f"workload.mode={mode}")
    built = build_workload(load_run_spec(cfg).workload, CpuBackend(BackendConfig(name="cpu")))
    before = [p.detach().clone() for p in built.eager.parameters()]
    for _ in range(2):
        built.step()
    with torch.no_grad():
        out = built.module(*built.inputs)
    expected = built.eager.reference(*built.inputs)  # type: ignore[operator]
    torch.testing.assert_close(out.double(), expected, rtol=1e-4, atol=1e-5)
    if mode == "train_step" and before:
        assert any(not torch.equal(b, p) for b, p in zip(before, built.eager.parameters(), strict=True))


def test_layernorm_and_softmax_costs_by_hand() -> None:
    x = torch.zeros(2, 3, 8)
    norm = NaiveLayerNorm(hidden=8, batch=2, seq_len=3)
    assert norm.bytes_moved(x) == 2 * 48 * 4 + 2 * 8 * 4 and norm.flop_count(x) == 7 * 48
    soft = NaiveSoftmax(hidden=8, batch=2, seq_len=3)
    assert soft.bytes_moved(x) == 2 * 48 * 4 and soft.flop_count(x) == 5 * 48


def test_matmul_cost_by_hand() -> None:
    mm = MatMul(m=4, n=5, k=6)
    x = torch.zeros(4, 6)
    assert mm.flop_count(x) == 2 * 4 * 5 * 6
    assert mm.bytes_moved(x) == (4 * 6 + 6 * 5 + 4 * 5) * 4


def test_attention_cost_by_hand() -> None:
    attention = NaiveAttention(batch=2, heads=3, seq_len=5, head_dim=4)
    q = torch.zeros(2, 3, 5, 4)
    assert attention.flop_count(q, q, q) == 4 * 2 * 3 * 5 * 5 * 4
    assert attention.bytes_moved(q, q, q) == 4 * (2 * 3 * 5 * 4) * 4


def test_swiglu_and_decoder_costs_by_hand() -> None:
    mlp = SwiGLU(hidden=8, intermediate=12, batch=2, seq_len=3)
    x = torch.zeros(2, 3, 8)
    assert mlp.flop_count(x) == 6 * 6 * 8 * 12 + 5 * 6 * 12
    assert mlp.bytes_moved(x) == 2 * 48 * 4 + 3 * 8 * 12 * 4
    layer = DecoderLayer(hidden=8, heads=2, intermediate=12, batch=2, seq_len=3)
    expected = 8 * 6 * 8**2 + 4 * 2 * 3**2 * 8 + mlp.flop_count(x) + 2 * 4 * 48
    assert layer.flop_count(x) == expected
    stack = DecoderStack(layers=3, hidden=8, heads=2, intermediate=12, batch=2, seq_len=3)
    assert stack.flop_count(x) == 3 * expected


def test_rotary_embedding_keeps_norms_and_varies_with_position() -> None:
    layer = DecoderLayer(hidden=8, heads=2, intermediate=12, seq_len=4)
    from workloads.llama import rotate

    x = torch.randn(1, 2, 4, 4)
    rotated = rotate(x, layer.cos, layer.sin)
    torch.testing.assert_close(rotated.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(rotated[:, :, 0], x[:, :, 0])  # position 0 is not rotated
    assert not torch.allclose(rotated[:, :, 1:], x[:, :, 1:])
    assert math.isclose(float(layer.cos[0, 0]), 1.0)


def test_bad_head_split_names_the_keys() -> None:
    with pytest.raises(ValueError, match=r"workload\.hidden=10 must split into workload\.heads=4"):
        DecoderLayer(hidden=10, heads=4, intermediate=8)
