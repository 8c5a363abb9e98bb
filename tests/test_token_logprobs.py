"""repro.cpu_lm.generate.token_logprobs is verl's logprobs_from_logits on CPU float32, bit for bit, forward and
backward: the vectorised logsumexp adds each row's terms in the order verl's per-row loop does."""

from __future__ import annotations

import pytest
import torch
from verl.utils.torch_functional import logprobs_from_logits

from repro.cpu_lm.generate import token_logprobs


@pytest.mark.parametrize("shape", [(7, 5, 84), (64, 13, 84), (3, 1, 49152), (1, 9, 40)])
def test_token_logprobs_are_verls_bits_with_their_gradients(shape) -> None:
    gen = torch.Generator().manual_seed(sum(shape))
    logits = (torch.randn(shape, generator=gen) * 3).requires_grad_()
    labels = torch.randint(0, shape[-1], shape[:-1], generator=gen)
    weights = torch.randn(shape[:-1], generator=gen)

    def run(fn) -> tuple[torch.Tensor, torch.Tensor]:
        logits.grad = None
        out = fn(logits, labels)
        (out * weights).sum().backward()
        return out.detach(), logits.grad.clone()

    ours, our_grad = run(token_logprobs)
    theirs, their_grad = run(logprobs_from_logits)
    assert ours.shape == shape[:-1]
    assert torch.equal(ours, theirs)
    assert torch.equal(our_grad, their_grad)
    # and they are log-probabilities: each row's exp sums to one over the vocabulary
    every = token_logprobs(logits.detach()[:1, :1].expand(shape[-1], 1, shape[-1]), torch.arange(shape[-1])[:, None])
    assert float(every.exp().sum()) == pytest.approx(1.0, abs=1e-5)
