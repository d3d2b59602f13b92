"""Transformer building blocks, each as a naive variant and PyTorch's built-in where one exists.

Variants of one block share inputs, parameters and a float64 reference, so only the lowering
path differs; `workload.compile=true` adds the compiled path to any of them.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from workloads.base import TokenWorkload, as_float64, require_positive, require_positive_number


class LayerNorm(TokenWorkload):
    """LayerNorm over the last dimension, with a weight and a bias."""

    def __init__(self, hidden: int, batch: int = 1, seq_len: int = 1, eps: float = 1e-5) -> None:
        super().__init__(hidden, batch, seq_len)
        require_positive_number(eps=eps)
        self.eps = eps
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, hidden))
        self.bias = nn.Parameter(torch.linspace(-0.1, 0.1, hidden))

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x, weight and bias; write the output."""
        return 2 * x.numel() * x.element_size() + 2 * self.hidden * self.weight.element_size()

    def flop_count(self, x: torch.Tensor) -> int:
        """Per element: mean, centre, square, variance sum, scale, weight, bias (7)."""
        return 7 * x.numel()

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """LayerNorm in float64 on CPU."""
        x64, weight, bias = as_float64(x, self.weight, self.bias)
        centred = x64 - x64.mean(-1, keepdim=True)
        return centred / torch.sqrt(centred.pow(2).mean(-1, keepdim=True) + self.eps) * weight + bias


class NaiveLayerNorm(LayerNorm):
    """Separate ops: mean, subtract, square, mean, add, sqrt, divide, scale, shift."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise with one ATen op per arithmetic step."""
        centred = x - x.mean(-1, keepdim=True)
        variance = (centred * centred).mean(-1, keepdim=True)
        return centred / torch.sqrt(variance + self.eps) * self.weight + self.bias


class BuiltinLayerNorm(LayerNorm):
    """`torch.nn.functional.layer_norm`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise with PyTorch's fused LayerNorm."""
        return F.layer_norm(x, (self.hidden,), self.weight, self.bias, self.eps)


class Softmax(TokenWorkload):
    """Softmax over the last dimension (no parameters)."""

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x, write the output."""
        return 2 * x.numel() * x.element_size()

    def flop_count(self, x: torch.Tensor) -> int:
        """Per element: max, subtract, exp, sum, divide (5)."""
        return 5 * x.numel()

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax in float64 on CPU."""
        (x64,) = as_float64(x)
        return torch.softmax(x64, dim=-1)


class NaiveSoftmax(Softmax):
    """exp(x - max) / sum: the stable formula, op by op."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax with one ATen op per step."""
        shifted = torch.exp(x - x.amax(-1, keepdim=True))
        return shifted / shifted.sum(-1, keepdim=True)


class BuiltinSoftmax(Softmax):
    """`torch.softmax`."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Softmax with PyTorch's fused kernel."""
        return torch.softmax(x, dim=-1)


class MatMul(nn.Module):
    """x (m x k) @ weight (k x n): the compute-bound counterpart to the norms."""

    def __init__(self, m: int, n: int, k: int) -> None:
        super().__init__()
        require_positive(m=m, n=n, k=k)
        self.m, self.n, self.k = m, n, k
        self.weight = nn.Parameter(torch.randn(k, n) / math.sqrt(k))

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """X of shape (m, k)."""
        return (torch.randn(self.m, self.k, generator=generator).to(dtype),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """One matmul."""
        return x @ self.weight

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x and the weight, write the output."""
        return (self.m * self.k + self.k * self.n + self.m * self.n) * x.element_size()

    def flop_count(self, x: torch.Tensor) -> int:
        """A multiply and an add per term: 2 m n k."""
        return 2 * self.m * self.n * self.k

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The product in float64 on CPU."""
        x64, weight = as_float64(x, self.weight)
        return x64 @ weight


def naive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """softmax(QK^T / sqrt(d) + causal mask) V, op by op."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    seq = q.shape[-2]
    mask = torch.ones(seq, seq, dtype=torch.bool, device=q.device).triu(1)
    return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v


class Attention(nn.Module):
    """Causal scaled dot-product attention over (batch, heads, seq_len, head_dim) q, k, v."""

    def __init__(self, batch: int = 1, heads: int = 8, seq_len: int = 128, head_dim: int = 64) -> None:
        super().__init__()
        require_positive(batch=batch, heads=heads, seq_len=seq_len, head_dim=head_dim)
        self.shape = (batch, heads, seq_len, head_dim)

    def example_inputs(self, dtype: torch.dtype, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """q, k and v."""
        return tuple(torch.randn(self.shape, generator=generator).to(dtype) for _ in range(3))

    def bytes_moved(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
        """Read q, k, v; write the output (a fused kernel never writes the scores)."""
        return 4 * q.numel() * q.element_size()

    def flop_count(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
        """QK^T and (scores)V, each 2 b h s s d, counted whole although the mask zeroes half."""
        batch, heads, seq, dim = self.shape
        return 4 * batch * heads * seq * seq * dim

    def reference(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Naive attention in float64 on CPU."""
        return naive_attention(*as_float64(q, k, v))


class NaiveAttention(Attention):
    """Scores materialised, masked, softmaxed, multiplied: every step an ATen op."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """softmax(QK^T / sqrt(d)) V with a causal mask."""
        return naive_attention(q, k, v)


class SdpaAttention(Attention):
    """`torch.nn.functional.scaled_dot_product_attention` with is_causal."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """PyTorch's fused attention."""
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class SwiGLU(TokenWorkload):
    """The Llama MLP: w2(silu(w1 x) * w3 x)."""

    def __init__(self, hidden: int, intermediate: int, batch: int = 1, seq_len: int = 1) -> None:
        super().__init__(hidden, batch, seq_len)
        require_positive(intermediate=intermediate)
        self.intermediate = intermediate
        self.w1 = nn.Linear(hidden, intermediate, bias=False)
        self.w3 = nn.Linear(hidden, intermediate, bias=False)
        self.w2 = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Gate, up, down projections."""
        out: torch.Tensor = self.w2(F.silu(self.w1(x)) * self.w3(x))
        return out

    def bytes_moved(self, x: torch.Tensor) -> int:
        """Read x and the three weights, write the output."""
        weights = 3 * self.hidden * self.intermediate * self.w1.weight.element_size()
        return 2 * x.numel() * x.element_size() + weights

    def flop_count(self, x: torch.Tensor) -> int:
        """Three matmuls of 2 T h i each, plus silu and the product (about 5 per intermediate value)."""
        tokens = self.tokens(x)
        return 6 * tokens * self.hidden * self.intermediate + 5 * tokens * self.intermediate

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The same MLP in float64 on CPU."""
        x64, w1, w2, w3 = as_float64(x, self.w1.weight, self.w2.weight, self.w3.weight)
        return F.silu(x64 @ w1.T) * (x64 @ w3.T) @ w2.T
