"""Batched sampling and log-probabilities for a causal LM on CPU, with left padding and a KV cache.

Our own loop rather than `generate()`: it draws from a dedicated `torch.Generator` (whose state goes into
checkpoints, so a resumed run samples exactly what an uninterrupted one would), uses pure temperature
sampling with no hidden top-k, and returns token ids cut at the first EOS. Rows that have finished leave the
running batch (`compact`), so a step costs what the rows still running cost.

A plain Qwen2 or Llama model runs through `repro.cpu_lm.qwen2_forward` instead of its own `forward`: the same
bits (tests/test_qwen2_forward.py) without transformers' per-call overhead, which on the tiny model is most
of a forward's time. Any other model (the tests' fixed-distribution stand-ins, a wrapped model) is called.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

from repro.cpu_lm.qwen2_forward import CompactForward, SharedPrompts, compact_forward


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


COMPACT_SHARE = 0.25  # drop finished rows once this share of the running batch has finished since the last drop


def prompt_groups(ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(first row of each distinct prompt, each row's distinct prompt) of left-padded prompts `ids`/`mask`
    [rows, P], in order of first appearance; None when no two rows repeat a prompt (nothing to share)."""
    seen: dict[tuple[int, ...], int] = {}
    starts: list[int] = []
    group: list[int] = []
    for row, key in enumerate(map(tuple, torch.cat([ids, mask], dim=1).tolist())):
        if key not in seen:
            seen[key] = len(starts)
            starts.append(row)
        group.append(seen[key])
    if len(starts) == len(group):
        return None
    return torch.tensor(starts, dtype=torch.long), torch.tensor(group, dtype=torch.long)


def compact_due(finished: int, live: int) -> bool:
    """Whether to drop `finished` rows from a running batch of `live`: every decode step still computes a
    finished row (weights, attention over its cache), while dropping it copies the cache of the rows that stay
    (`index_select`, about one step's `DynamicCache` concatenation). Waiting for a quarter bounds both: at most
    a quarter of each step is wasted on finished rows, and a batch is compacted O(log rows) times."""
    return finished > 0 and finished >= COMPACT_SHARE * live


def select_cache_rows(cache: Any, keep: torch.Tensor) -> Any:
    """The KV cache of rows `keep` only (transformers' `Cache.batch_select_indices`, in place, or the compact
    forward's `KVCache` of the same name). The tests' fixed-distribution models keep no cache: theirs is None,
    with nothing to select."""
    if cache is not None:
        cache.batch_select_indices(keep)
    return cache


def last_logits_only(model: torch.nn.Module) -> dict[str, int]:
    """`logits_to_keep=1` where the model takes it: the prefill then projects only each prompt's last position
    onto the vocabulary instead of all of them ([rows, prompt, vocab] fp32: 10 GB for 1024 rows of 50 tokens
    with a 49k vocabulary, and a fifth of a 135M model's prefill compute)."""
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


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
    compact: bool = True,
    share_prompts: bool = False,
    on_finish: Callable[[list[tuple[int, list[int]]]], Iterable[int]] | None = None,
) -> list[list[int]]:
    """One response per prompt (repeat a prompt to get several); each ends at EOS (included) or the cap.

    Row i's token t is the inverse CDF of its distribution at uniforms[i, t]: `uniforms` ([prompts,
    max_new_tokens] in [0, 1)) when given (evaluation seeds every sample on its own), else one
    `torch.rand((prompts, max_new_tokens), generator=generator)` drawn up front. One number a token, where
    `torch.multinomial` draws exponential noise for every vocabulary entry of every row, finished ones too
    (model 5's sampler: 10% of a Seq-balance step's CPU); and each row reads its own numbers, so a response
    does not depend on which other rows are still running.

    `compact` drops finished rows from the running batch (cache, mask, positions; `compact_due` says when):
    most responses end long before the longest, and without it every step computes every row until the last
    one ends. It changes no token: each row reads its own numbers.

    `share_prompts` prefills each distinct prompt once and copies its cache to the rows that repeat it (n
    samples of a prompt): fewer FLOPs, other bits than a prefill of every row (a matmul's rows change with
    their count under the pin), so a caller asks for it: since model 6 every one does (the CPU trainer, its
    held-out check, the Ave@32 sampler, the filter's pass counts, the model build's probe).
    A model that keeps no cache (the tests' stand-ins) prefills every row.

    `on_finish` (the early exit, issue 46) hears of every row as it ends, (row, its tokens) in row order at each
    decode step, and answers with rows to cancel: they stop decoding at once and come back cut where they were
    (no EOS). Every other row's tokens are what they would have been without it (each reads its own numbers)."""
    if not prompts:
        return []
    ids, mask = left_pad(prompts, pad_id)
    pos = positions(mask)
    fast = compact_forward(model)
    groups = prompt_groups(ids, mask) if share_prompts and _keeps_cache(model, fast) else None
    if groups is not None:
        first, group = groups
        ids, mask, pos = ids[first], mask[first], pos[first]
    if fast is not None:
        cache = fast.new_cache(ids.shape[0], ids.shape[1] + max_new_tokens)
        logits = fast(ids, mask, pos, cache, last_only=True)[:, -1, :]
    else:
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, **last_logits_only(model))
        cache, logits = out.past_key_values, out.logits[:, -1, :]
    if groups is not None:
        cache = select_cache_rows(cache, group)
        logits, mask, pos = logits[group], mask[group], pos[group]
    batch = len(prompts)
    if uniforms is None:
        uniforms = torch.rand((batch, max_new_tokens), generator=generator)
    rows = torch.arange(batch)  # the original row of each running row
    done = torch.zeros(batch, dtype=torch.bool)
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long)
    last_pos = pos[:, -1]
    for t in range(max_new_tokens):
        probs = torch.softmax(logits.float() / temperature, dim=-1)
        # inverse CDF; the clamp guards a cumulative sum that rounds below the row's uniform
        cdf = probs.cumsum(dim=-1)
        u = uniforms[rows, t : t + 1].to(cdf.dtype)
        nxt = torch.searchsorted(cdf, u * cdf[:, -1:]).squeeze(1).clamp(max=probs.shape[-1] - 1)
        nxt = torch.where(done, torch.full_like(nxt, pad_id), nxt)
        tokens[rows, t] = nxt
        ended = nxt == eos_id
        done |= ended
        last = t == max_new_tokens - 1
        if on_finish is not None:
            ending = (ended | ~done) if last else ended  # at the cap every running row ends
            if bool(ending.any()):
                ended_rows = rows[ending].tolist()
                finished = [(row, _cut(tokens[row, : t + 1].tolist(), eos_id, pad_id)) for row in ended_rows]
                cancel = set(on_finish(finished)) - set(ended_rows)
                if cancel and not last:
                    done |= torch.tensor([row in cancel for row in rows.tolist()], dtype=torch.bool)
        if bool(done.all()) or last:
            break
        if compact and compact_due(int(done.sum()), len(rows)):
            keep = torch.nonzero(~done).squeeze(1)
            cache = select_cache_rows(cache, keep)
            rows, done, nxt, mask, last_pos = rows[keep], done[keep], nxt[keep], mask[keep], last_pos[keep]
        mask = torch.cat([mask, torch.ones((len(rows), 1), dtype=mask.dtype)], dim=1)  # finished rows feed pads
        last_pos = last_pos + 1
        if fast is not None:
            logits = fast(nxt.unsqueeze(1), mask, last_pos.unsqueeze(1), cache)[:, -1, :]
        else:
            out = model(
                input_ids=nxt.unsqueeze(1),
                attention_mask=mask,
                position_ids=last_pos.unsqueeze(1),
                past_key_values=cache,
                use_cache=True,
            )
            cache, logits = out.past_key_values, out.logits[:, -1, :]
    return [_cut(row, eos_id, pad_id) for row in tokens.tolist()]


def _cut(row: list[int], eos_id: int, pad_id: int) -> list[int]:
    """A row's response: its tokens up to the first EOS (included), pads left out."""
    cut = row.index(eos_id) + 1 if eos_id in row else len(row)
    return [tok for tok in row[:cut] if tok != pad_id]


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
    model: torch.nn.Module, batch: Batch, with_entropy: bool, share_prompts: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per response token: log-prob under the model and the policy entropy (verl's own helpers). A plain
    Qwen2/Llama model's forward (and so its backward) is `qwen2_forward`'s, bit for bit transformers'.

    `share_prompts` computes each distinct prompt once (`_shared_prompt_logits`) where rows repeat prompts:
    the same values up to rounding, other bits, so only for callers whose numbers were made this way."""
    from verl.utils.torch_functional import entropy_from_logits

    fast = compact_forward(model)
    prompt = slice(0, batch.prompt_len)
    groups = None
    if share_prompts and _keeps_cache(model, fast):
        groups = prompt_groups(batch.input_ids[:, prompt], batch.attention_mask[:, prompt])
    if groups is not None:
        resp_logits = _shared_prompt_logits(model, fast, batch, *groups).float()
    else:
        if fast is not None:
            logits = fast(batch.input_ids, batch.attention_mask, batch.position_ids)
        else:
            logits = model(
                input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids
            ).logits
        # the logit at position t predicts token t+1: response tokens are predicted from P-1 .. P+R-2
        resp_logits = logits[:, batch.prompt_len - 1 : -1, :].float()
    logp = token_logprobs(resp_logits, batch.responses)
    entropy = entropy_from_logits(resp_logits) if with_entropy else None
    return logp, entropy


def token_logprobs(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """verl's `logprobs_from_logits` on CPU float32 (`logprobs_from_logits_v2`: the label's logit minus the
    row's logsumexp), with one logsumexp over all rows where verl loops over the batch to bound a GPU's peak
    memory: 2,000 small calls and their backward a grpo-n16 step, 8% of its CPU. The same bits, forward and
    backward (tests/test_token_logprobs.py compares it with verl's own function)."""
    if logits.dtype not in (torch.float32, torch.float64):
        from verl.utils.torch_functional import logprobs_from_logits

        return logprobs_from_logits(logits, labels)
    picked = torch.gather(logits, dim=-1, index=labels.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def _keeps_cache(model: torch.nn.Module, fast: CompactForward | None) -> bool:
    return fast is not None or "past_key_values" in inspect.signature(model.forward).parameters


def _shared_prompt_logits(
    model: torch.nn.Module, fast: CompactForward | None, batch: Batch, first: torch.Tensor, group: torch.Tensor
) -> torch.Tensor:
    """The logits that predict each response token [rows, R, vocab], with each distinct prompt's forward run
    once (rows `first`) and its keys/values gathered for the rows of its `group`: the prompt's last position
    predicts response token 0, and the responses' own forward (tokens 0..R-2, attending over their prompt's
    keys and their own) predicts the rest. Autograd flows through the gather into the prompt's forward."""
    p = batch.prompt_len
    p_ids, p_mask, p_pos = (t[first, :p] for t in (batch.input_ids, batch.attention_mask, batch.position_ids))
    r_ids, r_pos = batch.input_ids[:, p:-1], batch.position_ids[:, p:-1]
    mask = batch.attention_mask[:, :-1]
    if fast is not None:
        cache = SharedPrompts(group)
        head = fast(p_ids, p_mask, p_pos, cache, last_only=True)
        rest = fast(r_ids, mask, r_pos, cache) if r_ids.shape[1] else None
    else:
        out = model(input_ids=p_ids, attention_mask=p_mask, position_ids=p_pos, use_cache=True, logits_to_keep=1)
        head, cache = out.logits, out.past_key_values
        cache.batch_select_indices(group)
        rest = None
        if r_ids.shape[1]:
            rest = model(input_ids=r_ids, attention_mask=mask, position_ids=r_pos, past_key_values=cache).logits
    head = head[group]
    return head if rest is None else torch.cat([head, rest], dim=1)
