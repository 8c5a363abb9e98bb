"""Batched sampling and log-probabilities for a causal LM on CPU, with left padding and a KV cache.

Our own loop rather than `generate()`: it draws from a dedicated `torch.Generator` (whose state goes into
checkpoints, so a resumed run samples exactly what an uninterrupted one would), uses pure temperature
sampling with no hidden top-k, and returns token ids cut at the first EOS.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class Batch:
    """Prompt (left-padded) + response (right-padded) in one tensor, as verl lays out a rollout batch."""

    input_ids: torch.Tensor  # [B, P + R]
    attention_mask: torch.Tensor  # [B, P + R]
    position_ids: torch.Tensor  # [B, P + R]
    response_mask: torch.Tensor  # [B, R] float
    prompt_len: int

    @property
    def responses(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_len :]


def left_pad(prompts: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p, dtype=torch.long)
        mask[i, width - len(p) :] = 1
    return ids, mask


def positions(mask: torch.Tensor) -> torch.Tensor:
    return (mask.cumsum(dim=1) - 1).clamp(min=0)


@torch.no_grad()
def sample(
    model: torch.nn.Module,
    prompts: list[list[int]],
    *,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    generator: torch.Generator | None,
    temperature: float = 1.0,
    uniforms: torch.Tensor | None = None,
) -> list[list[int]]:
    """One response per prompt (repeat a prompt to get several); each ends at EOS (included) or the cap.

    `uniforms` ([prompts, max_new_tokens] in [0, 1)), when given, replaces `generator`: row i's token t is
    the inverse CDF of its distribution at uniforms[i, t]. Each row then samples from its own numbers, so a
    response does not depend on which other rows share its batch (evaluation seeds every sample on its own)."""
    if not prompts:
        return []
    ids, mask = left_pad(prompts, pad_id)
    pos = positions(mask)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True)
    cache, logits = out.past_key_values, out.logits[:, -1, :]
    batch = ids.shape[0]
    done = torch.zeros(batch, dtype=torch.bool)
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long)
    last_pos = pos[:, -1]
    for t in range(max_new_tokens):
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        if uniforms is None:
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        else:  # inverse CDF; the clamp guards a cumulative sum that rounds below the row's uniform
            cdf = probs.cumsum(dim=-1)
            nxt = torch.searchsorted(cdf, uniforms[:, t : t + 1].to(cdf.dtype) * cdf[:, -1:]).squeeze(1)
            nxt = nxt.clamp(max=probs.shape[-1] - 1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens[:, t] = nxt
        done |= nxt == eos_id
        if bool(done.all()) or t == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype)], dim=1)  # finished rows feed pads, ignored
        last_pos = last_pos + 1
        out = model(
            input_ids=nxt.unsqueeze(1),
            attention_mask=mask,
            position_ids=last_pos.unsqueeze(1),
            past_key_values=cache,
            use_cache=True,
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
    result = []
    for row in tokens.tolist():
        cut = row.index(eos_id) + 1 if eos_id in row else len(row)
        result.append([tok for tok in row[:cut] if tok != pad_id])
    return result


def make_batch(prompts: list[list[int]], responses: list[list[int]], pad_id: int) -> Batch:
    p_ids, p_mask = left_pad(prompts, pad_id)
    width = max(1, max(len(r) for r in responses))
    r_ids = torch.full((len(responses), width), pad_id, dtype=torch.long)
    r_mask = torch.zeros((len(responses), width), dtype=torch.long)
    for i, r in enumerate(responses):
        r_ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        r_mask[i, : len(r)] = 1
    mask = torch.cat([p_mask, r_mask], dim=1)
    return Batch(torch.cat([p_ids, r_ids], dim=1), mask, positions(mask), r_mask.float(), p_ids.shape[1])


def response_logprobs(
    model: torch.nn.Module, batch: Batch, with_entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per response token: log-prob under the model and the policy entropy (verl's own helpers)."""
    from verl.utils.torch_functional import entropy_from_logits, logprobs_from_logits

    logits = model(
        input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
    ).logits
    # the logit at position t predicts token t+1: response tokens are predicted from P-1 .. P+R-2
    resp_logits = logits[:, batch.prompt_len - 1 : -1, :].float()
    logp = logprobs_from_logits(resp_logits, batch.responses)
    entropy = entropy_from_logits(resp_logits) if with_entropy else None
    return logp, entropy
