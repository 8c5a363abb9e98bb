"""The CPU trainer's matrix products, computed by numpy's OpenBLAS instead of torch's MKL.

Under the arithmetic pin (repro/catalog/cpu_arithmetic.yaml) torch's float32 matmuls run MKL's COMPATIBLE
branch, the one MKL branch that gives the same bits on Intel and AMD: SSE2 code at 25-37 GFLOP/s on one
Xeon core at tiny-arith's shapes, where numpy's OpenBLAS, pinned to its Haswell (AVX2 + FMA) kernels by
OPENBLAS_CORETYPE and to one thread, runs the same products at 60-90 GFLOP/s (`benchmarks/bench_cpu_step.py`
prints both rates). OpenBLAS picks neither its kernels nor its blocking from the CPU it runs on once the core
type is fixed, and FMA rounds once on every CPU, so these products are as reproducible across x86 vendors as
the rest of the pin: `benchmarks/arithmetic_fingerprint.py` hashes them on this CPU and under qemu's AMD EPYC.

`linear` is `torch.nn.functional.linear`'s contract (x @ w.T + b, any leading dims) with an autograd backward
of two more OpenBLAS products; it rounds differently from MKL's kernel (and so from transformers' forward),
within float32's rounding of the same sum (tests/test_blas.py). The bias is added after the product, once.
"""

from __future__ import annotations

import numpy as np
import torch


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b for 2-D float tensors through numpy's BLAS. Both sides are made contiguous (or a transposed view
    of a contiguous array) first: numpy falls back to its own loop, other bits, for strides BLAS cannot take."""
    return torch.from_numpy(np.matmul(_blasable(a), _blasable(b)))


def _blasable(t: torch.Tensor) -> np.ndarray:
    t = t.detach()
    if t.is_contiguous():
        return t.numpy()
    if t.t().is_contiguous():
        return t.t().numpy().T
    return t.contiguous().numpy()


def _forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The product both paths compute (with autograd and without), so they give the same bits."""
    out = _matmul(x.reshape(-1, x.shape[-1]), weight.t())
    if bias is not None:
        out += bias.detach()
    return out.view(*x.shape[:-1], weight.shape[0])


_BLAS_DTYPES = (torch.float32, torch.float64)  # sgemm, and dgemm for the tests' gradcheck


class _Linear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.has_bias = bias is not None
        return _forward(x, weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        gx = gw = gb = None
        if ctx.needs_input_grad[0]:
            gx = _matmul(g, weight).view(*x.shape[:-1], weight.shape[1])
        if ctx.needs_input_grad[1]:
            gw = _matmul(g.t(), x.reshape(-1, x.shape[-1]))
        if ctx.has_bias and ctx.needs_input_grad[2]:
            gb = g.sum(0)
        return gx, gw, gb


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T (+ bias) with OpenBLAS's products, differentiable in all three."""
    if x.dtype not in _BLAS_DTYPES or weight.dtype != x.dtype or x.numel() == 0 or weight.numel() == 0:
        return torch.nn.functional.linear(x, weight, bias)  # bf16 and friends stay torch's; empty needs no BLAS
    tracked = x.requires_grad or weight.requires_grad or (bias is not None and bias.requires_grad)
    if torch.is_grad_enabled() and tracked:
        return _Linear.apply(x, weight, bias)
    return _forward(x, weight, bias)
