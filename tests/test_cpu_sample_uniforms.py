"""The CPU sampler's per-row uniforms (evaluation's per-sample seeds): exact categorical frequencies, and a
row's tokens independent of the rows beside it."""

from __future__ import annotations

import torch

from repro.cpu_lm.generate import sample


class _Fixed(torch.nn.Module):
    """A causal LM whose next-token distribution is the same at every position (no cache needed)."""

    def __init__(self, probs: list[float]) -> None:
        super().__init__()
        self.logits = torch.tensor(probs).log()

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        class Out:
            pass

        out = Out()
        out.logits = self.logits.expand(input_ids.shape[0], input_ids.shape[1], -1).clone()
        out.past_key_values = None
        return out


def test_inverse_cdf_sampling_follows_the_distribution() -> None:
    probs = [0.5, 0.3, 0.15, 0.05]  # token 3 would be EOS; use a pad id outside the vocabulary of draws
    model = _Fixed(probs)
    rows = 20_000
    uniforms = torch.rand((rows, 1), generator=torch.Generator().manual_seed(0))
    out = sample(model, [[0]] * rows, max_new_tokens=1, eos_id=99, pad_id=98, generator=None, uniforms=uniforms)
    counts = torch.bincount(torch.tensor([r[0] for r in out]), minlength=4).float() / rows
    sd = (torch.tensor(probs) * (1 - torch.tensor(probs)) / rows).sqrt()
    assert torch.all((counts - torch.tensor(probs)).abs() < 4 * sd), counts  # 4 standard deviations
    # the exact map: u below 0.5 is token 0, in [0.5, 0.8) token 1, [0.8, 0.95) token 2, else 3
    fixed = torch.tensor([[0.0], [0.49], [0.51], [0.79], [0.81], [0.94], [0.96], [0.999]])
    got = sample(model, [[0]] * 8, max_new_tokens=1, eos_id=99, pad_id=98, generator=None, uniforms=fixed)
    assert [r[0] for r in got] == [0, 0, 1, 1, 2, 2, 3, 3]


def test_a_rows_tokens_do_not_depend_on_its_neighbours() -> None:
    model = _Fixed([0.4, 0.3, 0.2, 0.1])
    u = torch.rand((6, 5), generator=torch.Generator().manual_seed(1))
    together = sample(model, [[0]] * 6, max_new_tokens=5, eos_id=99, pad_id=98, generator=None, uniforms=u)
    alone = [sample(model, [[0]], max_new_tokens=5, eos_id=99, pad_id=98, generator=None, uniforms=u[i : i + 1])[0]
             for i in range(6)]  # fmt: skip
    assert together == alone
