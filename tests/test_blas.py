"""repro.cpu_lm.blas.linear: torch's F.linear contract with OpenBLAS's products. Its values are F.linear's within
float32 rounding, its backward is the exact gradient (gradcheck in float64), and its bits do not depend on the
path taken (with or without autograd, contiguous or strided operands)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from repro.cpu_lm.blas import linear


def _operands(rows: int, into: int, out: int, seed: int, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn((rows, into), generator=gen, dtype=dtype), torch.randn((out, into), generator=gen, dtype=dtype),
            torch.randn((out,), generator=gen, dtype=dtype))  # fmt: skip


@pytest.mark.parametrize("rows,into,out", [(1, 64, 64), (37, 64, 128), (512, 128, 64), (300, 64, 84), (5, 3, 2)])
def test_values_and_gradients_are_f_linears_within_float32_rounding(rows: int, into: int, out: int) -> None:
    x, w, b = _operands(rows, into, out, seed=rows)
    grads = []
    for fn in (linear, F.linear):
        xs, ws, bs = (t.clone().requires_grad_() for t in (x, w, b))
        y = fn(xs.view(rows, 1, into), ws, bs)  # a leading dim more, as the model's [rows, q, hidden]
        assert y.shape == (rows, 1, out)
        (y.squeeze(1) * torch.linspace(-1, 1, out)).sum().backward()
        grads.append((y.detach(), xs.grad, ws.grad, bs.grad))
    scale = into**0.5  # a sum of `into` products of unit normals: relative error ~ eps * sqrt(into)
    for ours, theirs in zip(grads[0], grads[1], strict=True):
        assert ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=0, atol=float(theirs.abs().max()) * 1.2e-7 * scale * 4)


def test_the_backward_is_the_exact_gradient() -> None:
    x, w, b = _operands(6, 5, 4, seed=0, dtype=torch.float64)
    assert torch.autograd.gradcheck(linear, (x.requires_grad_(), w.requires_grad_(), b.requires_grad_()))
    assert torch.autograd.gradcheck(lambda x, w: linear(x, w), (x, w))  # no bias


def test_its_bits_do_not_depend_on_autograd_or_strides() -> None:
    x, w, b = _operands(40, 64, 96, seed=3)
    plain = linear(x, w, b)
    with torch.no_grad():
        assert torch.equal(linear(x, w, b), plain)
    assert torch.equal(linear(x.requires_grad_(), w, b).detach(), plain)
    wide = torch.cat([x.detach(), torch.zeros_like(x.detach())], dim=1)[:, :64]  # a strided view of the rows
    assert not wide.is_contiguous() and torch.equal(linear(wide, w, b), plain)
    assert torch.equal(linear(x.detach(), w.t().contiguous().t(), b), plain)  # a transposed weight
    assert not torch.equal(plain, F.linear(x.detach(), w, b))  # other kernels than MKL's: the control


def test_other_dtypes_and_empty_inputs_take_torchs_linear() -> None:
    x, w, b = _operands(4, 8, 3, seed=1)
    xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
    assert torch.equal(linear(xb, wb, bb), F.linear(xb, wb, bb))
    assert linear(x[:0], w, b).shape == (0, 3)
