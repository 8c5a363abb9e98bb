"""The CPU rollout server's sampler, against closed forms and a full forward pass (no Ray needed)."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import torch

from repro.verl_plugin.cpu_sampling import SamplingKey, _filter_logits, sample_batch


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

    server = _request_side(_Bigram(torch.zeros((4, 4))))

    async def go():
        server._init_requests()  # its asyncio objects belong to this loop
        short = await server.generate([1] * 60, {"max_tokens": 100}, "a")  # room for 4 tokens only
        default = await server.generate([1] * 10, {}, "b")  # response_length
        return short, default

    short, default = asyncio.run(go())
    assert len(short.token_ids) <= 4 and len(default.token_ids) <= 16
    assert short.extra_fields["global_steps"] == 3 and short.stop_reason == "completed"
    with pytest.raises(ValueError, match="no room"):
        asyncio.run(server.generate([1] * 64, {}, "c"))


def _request_side(model: torch.nn.Module):
    """A CpuRolloutServer with its request path only (no checkpoint loaded): global_steps 3, cap 16 tokens."""
    from types import SimpleNamespace

    from repro.verl_plugin.cpu_rollout import CpuRolloutServer

    server = CpuRolloutServer.__new__(CpuRolloutServer)
    server.config = SimpleNamespace(response_length=16, prompt_length=48, max_num_seqs=8)
    server.max_model_len = 64
    server.global_steps = 3
    server.model = model
    server.eos_ids, server.pad_id, server.generator = {3}, 0, torch.Generator().manual_seed(0)
    return server


HANG_GUARD_S = 120.0  # only a failure guard: each wait below ends as soon as what it waits for happens


class _Held(_Bigram):
    """A bigram model that never emits EOS and whose third forward pass waits for `cut` (the server's stop
    event, once the test gives it): a batch is cut two tokens in, exactly, however fast the machine is."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__(table)
        self.calls = 0
        self.cut = None

    def forward(self, *args, **kwargs):
        self.calls += 1
        if self.calls == 3 and self.cut is not None:
            assert self.cut.wait(HANG_GUARD_S), "the batch was never cut"
        return super().forward(*args, **kwargs)


def test_abort_cuts_the_running_batch_parks_new_requests_and_counts_resumes() -> None:
    """vLLM's pause as verl's vLLMHttpServer drives it: abort_all_requests answers the running requests
    "aborted" with their partial responses and returns once nothing runs; requests arriving behind the closed
    gate wait for resume_generation (or are refused at once under reject_request); a request that comes
    back under an aborted request's id (verl's FullyAsyncLLMServerClient resuming it) is counted."""
    never_eos = torch.zeros((4, 4))
    never_eos[:, 3] = -1e9
    model = _Held(never_eos)
    server = _request_side(model)

    async def go():
        server._init_requests()
        model.cut = server._stop  # the batch's third forward pass waits for the abort's stop
        running = asyncio.create_task(server.generate([1, 2], {"max_tokens": 16}, "r1"))
        end = time.monotonic() + HANG_GUARD_S
        while model.calls < 3:  # the batch is two tokens in and waits there
            assert time.monotonic() < end, "the batch never started"
            await asyncio.sleep(0.01)
        result = await server.abort_all_requests()
        partial = await running
        assert running.done() and not server._model_lock.locked()  # nothing runs once abort returns
        parked = asyncio.create_task(server.generate([1, 2], {"max_tokens": 2}, "r1"))  # the resume
        await asyncio.sleep(0.1)
        still_parked = not parked.done()
        await server.resume_generation()
        resumed = await parked
        await server.abort_all_requests(reject_request=True)
        refused = await server.generate([1], {"max_tokens": 2}, "r2")
        await server.resume_generation()
        return result, partial, still_parked, resumed, refused

    result, partial, still_parked, resumed, refused = asyncio.run(go())
    assert partial.stop_reason == "aborted" and len(partial.token_ids) == 2, partial
    assert len(partial.log_probs or []) in (0, len(partial.token_ids))
    assert partial.extra_fields["global_steps"] == 3
    assert result["aborted_count"] == 1
    assert still_parked and resumed.stop_reason == "completed" and len(resumed.token_ids) == 2
    assert refused.stop_reason == "aborted" and refused.token_ids == []
    assert (server.aborted_requests, server.resumed_requests, server.requests_served) == (1, 1, 2)
