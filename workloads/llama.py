"""A Llama-style decoder layer and a stack of them: the blocks profiled one by one, together.

The layer is RMSNorm, attention with rotary embeddings, SwiGLU and residuals.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from workloads.base import TokenWorkload, as_float64, float64_copy, require_positive, require_positive_number
from workloads.blocks import SwiGLU, naive_attention

ATTENTION = ("sdpa", "naive")


def rotary_tables(seq_len: int, head_dim: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cos and sin of the rotary angles, shape (seq_len, head_dim / 2)."""
    inverse = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inverse)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Apply rotary embeddings to (batch, heads, seq, head_dim), pairing the two halves."""
    first, second = x.chunk(2, dim=-1)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


def io_and_weight_bytes(module: nn.Module, x: torch.Tensor) -> int:
    """Bytes of a block that reads x and each weight once and writes an output shaped like x."""
    weights = sum(p.numel() * p.element_size() for p in module.parameters())
    return 2 * x.numel() * x.element_size() + weights


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm, as in workloads.rmsnorm (kept here as a function the layer and its reference share)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


class DecoderLayer(TokenWorkload):
    """One pre-norm decoder layer: x + attn(norm(x)), then + mlp(norm(x))."""

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(
        self,
        hidden: int,
        heads: int,
        intermediate: int,
        batch: int = 1,
        seq_len: int = 1,
        eps: float = 1e-6,
        rope_theta: float = 10000.0,
        attention: str = "sdpa",
    ) -> None:
        super().__init__(hidden, batch, seq_len)
        require_positive(heads=heads, intermediate=intermediate)
        require_positive_number(eps=eps, rope_theta=rope_theta)
        if hidden % heads or (hidden // heads) % 2:
            raise ValueError(f"workload.hidden={hidden} must split into workload.heads={heads} even-sized heads")
        if attention not in ATTENTION:
            raise ValueError(f"workload.attention={attention!r} is not allowed; choose one of: {', '.join(ATTENTION)}")
        self.heads, self.eps, self.attention = heads, eps, attention
        self.head_dim = hidden // heads
        self.attn_norm = nn.Parameter(torch.ones(hidden))
        self.mlp_norm = nn.Parameter(torch.ones(hidden))
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.mlp = SwiGLU(hidden, intermediate, batch, seq_len)
        cos, sin = rotary_tables(seq_len, self.head_dim, rope_theta)
        self.register_buffer("cos", cos.float(), persistent=False)
        self.register_buffer("sin", sin.float(), persistent=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        return x.view(batch, seq, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attention block then MLP block, each with a residual."""
        q, k, v = self.qkv(rms_norm(x, self.attn_norm, self.eps)).chunk(3, dim=-1)
        q, k, v = self._heads(q), self._heads(k), self._heads(v)
        seq = x.shape[1]
        q, k = rotate(q, self.cos[:seq], self.sin[:seq]), rotate(k, self.cos[:seq], self.sin[:seq])
        if self.attention == "sdpa":
            mixed = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            mixed = naive_attention(q, k, v)
        x = x + self.out(mixed.transpose(1, 2).reshape(x.shape))
        out: torch.Tensor = x + self.mlp(rms_norm(x, self.mlp_norm, self.eps))
        return out

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x and every weight, write the output."""
        return io_and_weight_bytes(self, x)

    def flop_count(self, x: torch.Tensor) -> int:
        """Projections (qkv and out: 8 T h^2), attention (4 b s^2 h), the MLP, and the norms."""
        tokens = self.tokens(x)
        attention = 4 * self.batch * x.shape[1] ** 2 * self.hidden
        norms = 2 * (4 * x.numel())
        return 8 * tokens * self.hidden**2 + attention + self.mlp.flop_count(x) + norms

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same layer in float64 on CPU, with naive attention (not the fused kernel)."""
        return float64_copy(self, attention="naive")(*as_float64(x))  # type: ignore[no-any-return]


class DecoderStack(TokenWorkload):
    """`layers` decoder layers in sequence: a small Llama-style model without embeddings."""

    def __init__(
        self, layers: int, hidden: int, heads: int, intermediate: int, batch: int = 1, seq_len: int = 1
    ) -> None:
        super().__init__(hidden, batch, seq_len)
        require_positive(layers=layers)
        self.layers = nn.ModuleList(DecoderLayer(hidden, heads, intermediate, batch, seq_len) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Each layer in turn."""
        for layer in self.layers:
            x = layer(x)
        return x

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x and every weight once, write the output."""
        return io_and_weight_bytes(self, x)

    def flop_count(self, x: torch.Tensor) -> int:
        """The layers' FLOPs added up."""
        return sum(layer.flop_count(x) for layer in self.layers)  # type: ignore[operator]

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Each layer's float64 reference in turn."""
        for layer in self.layers:
            x = layer.reference(x)  # type: ignore[operator]
        return x
