"""The CPU rollout server's sampler, against closed forms and a full forward pass (no Ray needed)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from repro.verl_plugin.cpu_rollout import SamplingKey, _filter_logits, sample_batch


def test_top_k_and_top_p_keep_exactly_the_tokens_vllm_keeps() -> None:
    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]])
    logits = probs.log()
    kept = torch.isfinite(_filter_logits(logits, top_k=2, top_p=1.0))
    assert kept.tolist() == [[True, True, False, False, False]]
    # top-p keeps the smallest prefix (by probability) whose mass reaches p: 0.5 + 0.2 >= 0.6
    kept = torch.isfinite(_filter_logits(logits, top_k=-1, top_p=0.6))
    assert kept.tolist() == [[True, True, False, False, False]]
    kept = torch.isfinite(_filter_logits(logits, top_k=-1, top_p=0.45))  # the first token alone reaches it
    assert kept.tolist() == [[True, False, False, False, False]]
    shuffled = logits[:, [3, 0, 4, 1, 2]]  # order in the vocabulary does not matter
    kept = torch.isfinite(_filter_logits(shuffled, top_k=-1, top_p=0.6))
    assert kept.tolist() == [[False, True, False, True, False]]
    assert torch.equal(_filter_logits(logits, top_k=-1, top_p=1.0), logits)  # both off: untouched


class _Bigram(torch.nn.Module):
    """A causal LM whose next-token logits depend on the last token only: a fixed table."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        class Out:
            pass

        out = Out()
        out.logits = self.table[input_ids]
        out.past_key_values = None
        return out


def test_sampling_frequencies_and_logprobs_follow_the_model() -> None:
    vocab, eos, pad = 4, 3, 0
    table = torch.log(torch.tensor([[0.1, 0.6, 0.2, 0.1]] * vocab))
    model = _Bigram(table)
    generator = torch.Generator().manual_seed(0)
    prompts = [[1, 2]] * 4000
    out = sample_batch(model, prompts, [1] * 4000, SamplingKey(1.0, -1, 1.0), {eos}, pad, generator)
    first = np.array([tokens[0] for tokens, _, _ in out])
    freq = np.bincount(first, minlength=vocab) / first.size
    expected = np.array([0.1, 0.6, 0.2, 0.1])
    assert np.all(np.abs(freq - expected) < 4 * np.sqrt(expected * (1 - expected) / first.size))  # 4 sigma
    expected_logp = torch.log_softmax(table[2], -1)  # the prompt's last token is 2
    for tokens, logps, _ in out[:50]:
        assert logps[0] == pytest.approx(float(expected_logp[tokens[0]]), abs=1e-6)


def test_responses_stop_at_eos_or_their_own_cap() -> None:
    vocab, eos, pad = 4, 3, 0
    always_eos = torch.full((vocab, vocab), -1e9)
    always_eos[:, eos] = 0.0
    never_eos = torch.zeros((vocab, vocab))
    never_eos[:, eos] = -1e9
    generator = torch.Generator().manual_seed(1)
    key = SamplingKey(1.0, -1, 1.0)
    stopped = sample_batch(_Bigram(always_eos), [[1], [1, 2]], [5, 5], key, {eos}, pad, generator)
    assert [(t, s) for t, _, s in stopped] == [([eos], True), ([eos], True)]
    capped = sample_batch(_Bigram(never_eos), [[1], [2]], [2, 4], key, {eos}, pad, generator)
    assert [len(t) for t, _, _ in capped] == [2, 4] and not any(s for _, _, s in capped)
    greedy = sample_batch(_Bigram(torch.log(torch.tensor([[0.1, 0.2, 0.6, 0.1]] * vocab))), [[1]], [3],
                          SamplingKey(0.0, -1, 1.0), {eos}, pad, generator)  # fmt: skip
    assert greedy[0][0] == [2, 2, 2]  # temperature 0 is greedy


def test_server_applies_vllms_max_tokens_rules(tmp_path) -> None:
    from types import SimpleNamespace

    from repro.verl_plugin.cpu_rollout import CpuRolloutServer

    server = CpuRolloutServer.__new__(CpuRolloutServer)  # the request path only, without loading a model
    server.config = SimpleNamespace(response_length=16, prompt_length=48, max_num_seqs=8)
    server.max_model_len = 64
    server._faults, server._aborted, server._queue = set(), False, {}
    server._worker, server.requests_served, server.global_steps = None, 0, 3
    server.model = _Bigram(torch.zeros((4, 4)))
    server.eos_ids, server.pad_id, server.generator = {3}, 0, torch.Generator().manual_seed(0)
    server._model_lock = asyncio.Lock()

    async def go():
        server._wake = asyncio.Event()
        short = await server.generate([1] * 60, {"max_tokens": 100}, "a")  # room for 4 tokens only
        default = await server.generate([1] * 10, {}, "b")  # response_length
        return short, default

    short, default = asyncio.run(go())
    assert len(short.token_ids) <= 4 and len(default.token_ids) <= 16
    assert short.extra_fields["global_steps"] == 3 and short.stop_reason == "completed"
    with pytest.raises(ValueError, match="no room"):
        asyncio.run(server.generate([1] * 64, {}, "c"))
