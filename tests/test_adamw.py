"""repro.cpu_lm.adamw: torch's AdamW, bit for bit, except that the denominator's square root is the correctly
rounded one (the same on every CPU) rather than torch's avx2 kernel, which refines the CPU's approximate
reciprocal square root."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from repro.cpu_lm.adamw import AdamW, exact_sqrt


def test_exact_sqrt_is_ieee_correctly_rounded() -> None:
    # numpy's float32 sqrt is the hardware's SQRTPS/SQRTSS, which IEEE 754 requires to be correctly rounded;
    # the values span normal magnitudes, subnormals, zero and the exact squares
    rng = np.random.default_rng(0)
    x = np.concatenate(
        [
            rng.uniform(0, 1, 50_000).astype(np.float32) * np.float32(2.0) ** rng.integers(-60, 60, 50_000),
            np.array([0.0, 1.0, 4.0, 2.0, np.finfo(np.float32).tiny / 8, np.finfo(np.float32).max], np.float32),
        ]
    ).astype(np.float32)
    got = exact_sqrt(torch.from_numpy(x)).numpy()
    assert got.dtype == np.float32
    assert np.array_equal(got.view(np.int32), np.sqrt(x).view(np.int32))


def _train(optimizer_cls, params: list[torch.nn.Parameter], steps: int, **kw) -> torch.optim.Optimizer:
    opt = optimizer_cls(params, lr=3e-3, weight_decay=0.1, **kw)
    gen = torch.Generator().manual_seed(1)
    for _ in range(steps):
        for k, p in enumerate(params):
            p.grad = None if k == 2 else torch.randn(p.shape, generator=gen)  # a parameter without a gradient
        opt.step()
    return opt


def _params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(0)
    return [torch.nn.Parameter(torch.randn(shape, generator=gen)) for shape in ((64, 33), (17,), (5, 5))]


def test_the_step_is_torchs_adamw_with_the_correctly_rounded_root(monkeypatch) -> None:
    ours = _params()
    _train(AdamW, ours, steps=6)
    theirs = _params()
    monkeypatch.setattr(torch.Tensor, "sqrt", lambda self: exact_sqrt(self))  # torch's AdamW with the exact root
    _train(torch.optim.AdamW, theirs, steps=6, foreach=False)
    monkeypatch.undo()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a, b)
    assert not torch.equal(ours[0], _params()[0]) and torch.equal(ours[2], _params()[2])  # moved; untouched


def test_a_torch_adamw_checkpoint_resumes_in_it() -> None:
    """Runs saved with torch.optim.AdamW hold the same state: it loads, and the moments carry on."""
    torch_params = _params()
    saved = _train(torch.optim.AdamW, torch_params, steps=3).state_dict()
    params = [torch.nn.Parameter(p.detach().clone()) for p in torch_params]
    resumed = AdamW(params, lr=3e-3, weight_decay=0.1)
    resumed.load_state_dict(saved)
    state = resumed.state[params[0]]
    assert float(state["step"]) == 3.0
    assert torch.equal(state["exp_avg_sq"], saved["state"][0]["exp_avg_sq"])
    params[0].grad = torch.ones_like(params[0])
    resumed.step()
    assert float(resumed.state[params[0]]["step"]) == 4.0


@pytest.mark.parametrize("wd", [0.0, 0.5])
def test_one_step_from_zero_state_is_the_closed_form(wd: float) -> None:
    """Step 1 of AdamW from zero moments: p <- p(1 - lr wd) - lr g / (|g| + eps) (bias corrections cancel)."""
    lr, eps = 1e-2, 1e-8
    g = torch.tensor([4.0, -0.25, 2.0**-10, 0.0])  # |g| exact in float32 through the moments and the root
    p = torch.nn.Parameter(torch.ones(4))
    opt = AdamW([p], lr=lr, weight_decay=wd, eps=eps)
    p.grad = g.clone()
    opt.step()
    expected = (1 - lr * wd) - lr * g.double() / (g.double().abs() + eps)
    assert torch.allclose(p.detach().double(), expected, rtol=0, atol=2e-7)
