"""The CPU rollout stand-in's sampling (repro.verl_plugin.cpu_rollout): one response per prompt from a transformers
model, batched with a KV cache, under vLLM's sampling rules (temperature, top-k, top-p, EOS) and with the
log-probs vLLM returns. Torch only: nothing of verl's or Ray's, so the server's numbers are testable alone.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

import torch

from repro.cpu_lm.generate import compact_due, last_logits_only, left_pad, positions, select_cache_rows


@dataclass(frozen=True)
class SamplingKey:
    """Requests sampled in one batch share these."""

    temperature: float
    top_k: int
    top_p: float


def _filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """vLLM's top-k then top-p truncation (top_k <= 0 and top_p >= 1 mean off)."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        drop = probs.cumsum(dim=-1) - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    return logits


@torch.no_grad()
def sample_batch(
    model: torch.nn.Module,
    prompts: list[list[int]],
    max_tokens: list[int],
    key: SamplingKey,
    eos_ids: set[int],
    pad_id: int,
    generator: torch.Generator,
    compact: bool = True,
    stop: threading.Event | None = None,
) -> list[tuple[list[int], list[float], bool]]:
    """One response per prompt: (token ids ending at EOS or the cap, their log-probs, stopped at EOS).

    `stop`, when set from another thread, ends the batch before its next token: each unfinished row comes back
    with the tokens it has so far (vLLM's abort, which returns a request's partial output).

    `compact` drops rows that have finished (EOS or their own cap) from the running batch, cache included
    (`repro.cpu_lm.generate.compact_due` says when), so a step computes only the rows still running. It changes
    which of the server generator's random numbers each row draws, not the distribution it samples from;
    greedy responses (temperature 0) are the same either way."""
    batch = len(prompts)
    ids, mask = left_pad(prompts, pad_id)
    pos = positions(mask)
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **last_logits_only(model))
    cache, logits = out.past_key_values, out.logits[:, -1, :]
    rows = torch.arange(batch)  # the original row of each running row
    caps = torch.tensor(max_tokens)
    done = torch.zeros(batch, dtype=torch.bool)
    eos = torch.tensor(sorted(eos_ids), dtype=torch.long)
    tokens: list[list[int]] = [[] for _ in range(batch)]
    logps: list[list[float]] = [[] for _ in range(batch)]
    stopped = [False] * batch
    last_pos = pos[:, -1]
    temperature = max(float(key.temperature), 1e-5)  # temperature 0 -> greedy in the limit
    for t in range(int(caps.max())):
        if stop is not None and stop.is_set():
            break
        scaled = logits.float() / temperature
        logp_all = torch.log_softmax(scaled, dim=-1)
        if key.temperature <= 0:
            nxt = scaled.argmax(dim=-1)
        else:
            probs = torch.softmax(_filter_logits(scaled, key.top_k, key.top_p), dim=-1)
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
        picked = logp_all.gather(1, nxt.unsqueeze(1)).squeeze(1)
        is_eos = torch.isin(nxt, eos)
        for row, was_done, tok, logp, hit in zip(
            rows.tolist(), done.tolist(), nxt.tolist(), picked.tolist(), is_eos.tolist(), strict=True
        ):
            if not was_done:
                tokens[row].append(tok)
                logps[row].append(logp)
                stopped[row] = hit
        done |= is_eos | (caps <= t + 1)
        if bool(done.all()):
            break
        if compact and compact_due(int(done.sum()), len(rows)):
            keep = torch.nonzero(~done).squeeze(1)
            cache = select_cache_rows(cache, keep)
            rows, caps, done, nxt, mask, last_pos = (x[keep] for x in (rows, caps, done, nxt, mask, last_pos))
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], dim=1)
        last_pos = last_pos + 1
        out = model(
            input_ids=torch.where(done, torch.full_like(nxt, pad_id), nxt).unsqueeze(1),
            attention_mask=mask,
            position_ids=last_pos.unsqueeze(1),
            past_key_values=cache,
            use_cache=True,
        )
        cache, logits = out.past_key_values, out.logits[:, -1, :]
    return [(tokens[i], logps[i], stopped[i]) for i in range(batch)]
