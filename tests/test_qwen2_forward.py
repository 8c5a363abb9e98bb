"""repro.cpu_lm.qwen2_forward computes transformers' forward: with torch's own products (`LINEAR = F.linear`) its
bits, in the prefill, decoding with a cache, after rows are dropped, the update's forward and its gradients, and
so the sampler's tokens, on small random Qwen2 and Llama models; with OpenBLAS's products (the trainer's) the same
values within float32 rounding (the tests named *openblas*)."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from repro.cpu_lm import generate, qwen2_forward
from repro.cpu_lm.generate import left_pad, make_batch, positions, response_logprobs
from repro.cpu_lm.qwen2_forward import FORCE_TRANSFORMERS_ENV, CompactForward, compact_forward

VOCAB, PAD, EOS = 40, 0, 2


@pytest.fixture(autouse=True)
def torch_products(request, monkeypatch) -> None:
    """Every test but the *openblas* ones checks the rest of the forward bit for bit: with torch's products."""
    if "openblas" not in request.node.name:
        monkeypatch.setattr(qwen2_forward, "LINEAR", torch.nn.functional.linear)


def qwen2(heads: int = 2, kv_heads: int = 1, seed: int = 0) -> torch.nn.Module:
    """A tiny-arith-shaped Qwen2 (biases on q/k/v, tied embeddings) with random weights."""
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=EOS,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config).eval()


def llama(bias: bool) -> torch.nn.Module:
    """SmolLM2's architecture in small (grouped-query attention, no biases), or with every bias Llama allows."""
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=48,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=1,
        max_position_embeddings=64,
        rope_theta=100000.0,
        tie_word_embeddings=True,
        attention_bias=bias,
        mlp_bias=bias,
        pad_token_id=PAD,
        bos_token_id=1,
        eos_token_id=EOS,
    )
    torch.manual_seed(1)
    model = LlamaForCausalLM(config).eval()
    if bias:  # biases start at zero: make them count
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith(".bias"):
                    p.normal_(0, 0.1)
    return model


MODELS = {
    "qwen2": qwen2,
    "qwen2-mha": lambda: qwen2(heads=2, kv_heads=2),  # one KV head a query head: keys reach SDPA unrepeated
    "llama": lambda: llama(bias=False),
    "llama-bias": lambda: llama(bias=True),
}


def prompts(lengths: list[int], seed: int = 1) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (n,), generator=gen).tolist() for n in lengths]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_prefill_decode_and_dropped_rows_are_bitwise_transformers(name: str) -> None:
    model = MODELS[name]()
    fast = compact_forward(model)
    assert fast is not None
    ids, mask = left_pad(prompts([5, 9, 7, 9, 3]), PAD)
    pos = positions(mask)
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        ref = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=True, logits_to_keep=1)
        cache = fast.new_cache(ids.shape[0], ids.shape[1] + 8)
        assert torch.equal(fast(ids, mask, pos, cache, last_only=True), ref.logits)
        # every position's logits too (the update's forward, without grad)
        assert torch.equal(fast(ids, mask, pos), model(input_ids=ids, attention_mask=mask, position_ids=pos).logits)
        hf_cache, last = ref.past_key_values, pos[:, -1]
        # rows 1 and 3 have the longest prompts: once only they run, no row is padded and transformers leaves
        # the mask out (SDPA's grouped-query path), which the compact forward must follow
        drops = {2: torch.tensor([1, 3, 4]), 4: torch.tensor([0, 1])}
        for t in range(7):
            if t in drops:
                hf_cache.batch_select_indices(drops[t])
                generate.select_cache_rows(cache, drops[t])
                mask, last = mask[drops[t]], last[drops[t]]
            nxt = torch.randint(3, VOCAB, (len(last), 1), generator=gen)
            mask = torch.cat([mask, torch.ones((len(last), 1), dtype=mask.dtype)], dim=1)
            last = last + 1
            out = model(input_ids=nxt, attention_mask=mask, position_ids=last[:, None], past_key_values=hf_cache)
            hf_cache = out.past_key_values
            assert torch.equal(fast(nxt, mask, last[:, None], cache), out.logits), f"decode step {t}"
        assert bool(mask.bool().all())  # the unmasked path was reached


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("lengths", [([5, 9, 7, 3], [3, 5, 1, 4]), ([6, 6, 6], [4, 4, 4])], ids=["padded", "full"])
def test_update_forward_and_gradients_are_bitwise_transformers(name: str, lengths) -> None:
    """The log-prob forward in train mode, and every parameter's gradient through a loss on all logits and on
    the trainer's log-probs (a batch with padding, and one without: transformers' masked and causal paths)."""
    model = MODELS[name]().train()
    batch = make_batch(prompts(lengths[0]), prompts(lengths[1], seed=3), PAD)
    weights = torch.randn((*batch.input_ids.shape, VOCAB), generator=torch.Generator().manual_seed(4))

    def run(forward) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        logits = forward()
        logp, entropy = response_logprobs(model, batch, with_entropy=True)
        ((logits * weights).sum() + (logp * batch.response_mask).sum() + entropy.sum()).backward()
        return logits.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    kwargs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask, position_ids=batch.position_ids)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FORCE_TRANSFORMERS_ENV, "1")
        ref_logits, ref_grads = run(lambda: model(**kwargs).logits)
    fast = compact_forward(model)
    logits, grads = run(lambda: fast(batch.input_ids, batch.attention_mask, batch.position_ids))
    assert torch.equal(logits, ref_logits)
    different = [n for n in ref_grads if not torch.equal(grads[n], ref_grads[n])]
    assert not different


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_sample_draws_the_same_tokens_on_both_paths(name: str, monkeypatch) -> None:
    """Generator and per-row uniforms, with compaction: every token as transformers' forward gives it."""
    model = MODELS[name]()
    rows = prompts([5, 9, 7, 9, 3, 8] * 4)
    kwargs = dict(max_new_tokens=16, eos_id=EOS, pad_id=PAD)
    uniforms = torch.rand((len(rows), 16), generator=torch.Generator().manual_seed(6))

    def both() -> list[list[list[int]]]:
        return [
            generate.sample(model, rows, generator=torch.Generator().manual_seed(5), **kwargs),
            generate.sample(model, rows, generator=None, uniforms=uniforms, temperature=1.5, **kwargs),
            # prompts of one length: no padding anywhere, so no mask in any forward
            generate.sample(model, prompts([7] * 8), generator=torch.Generator().manual_seed(7), **kwargs),
        ]

    fast = both()
    monkeypatch.setenv(FORCE_TRANSFORMERS_ENV, "1")
    assert both() == fast
    assert len({len(r) for r in fast[0]}) > 3  # rows ended at different steps: compaction ran


def test_other_models_keep_transformers_path(monkeypatch) -> None:
    model = qwen2()
    assert compact_forward(model) is not None
    assert compact_forward(torch.nn.Sequential(model)) is None  # a wrapper: its forward is its own
    model.config._attn_implementation = "eager"
    assert compact_forward(model) is None
    model.config._attn_implementation = "sdpa"
    handle = model.model.layers[0].register_forward_hook(lambda *_: None)
    assert compact_forward(model) is None
    handle.remove()
    assert compact_forward(qwen2().to(torch.bfloat16)) is None  # only float32 is checked bitwise
    monkeypatch.setenv(FORCE_TRANSFORMERS_ENV, "1")
    assert compact_forward(model) is None


def test_prompt_groups_in_order_of_first_appearance() -> None:
    ids, mask = left_pad([[5, 6], [7], [5, 6], [7], [8, 9], [5, 6]], PAD)
    first, group = generate.prompt_groups(ids, mask)
    assert first.tolist() == [0, 1, 4]
    assert group.tolist() == [0, 1, 0, 1, 2, 0]
    assert generate.prompt_groups(*left_pad([[5], [6], [7]], PAD)) is None  # nothing repeats: nothing to share
    # the same ids with another padding are another prompt (a pad id inside a prompt)
    ids, mask = torch.tensor([[PAD, 5], [PAD, 5]]), torch.tensor([[0, 1], [1, 1]])
    assert generate.prompt_groups(ids, mask) is None


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize(
    "lengths",
    [([5, 9, 7], [3, 5, 1, 4, 2, 5]), ([6, 6], [4, 4, 4, 4]), ([4, 6], [1, 1, 1, 1])],
    ids=["padded", "full", "one-token"],
)
def test_shared_prompts_compute_transformers_bits_and_the_unshared_values(name: str, lengths) -> None:
    """Each distinct prompt's forward once, its keys gathered for the rows that repeat it: log-probs, entropy
    and every gradient bit for bit as transformers computes the same sharing through its cache, and within
    rounding of the forward over every row; the prompt forward sees the distinct prompts only."""
    model = MODELS[name]().train()
    distinct = prompts(lengths[0])
    rows = [distinct[i % len(distinct)] for i in range(len(lengths[1]))]
    batch = make_batch(rows, prompts(lengths[1], seed=3), PAD)
    mask = batch.response_mask.bool()

    def run(share: bool) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        logp, entropy = response_logprobs(model, batch, with_entropy=True, share_prompts=share)
        ((logp * batch.response_mask).sum() + (entropy * batch.response_mask).sum()).backward()
        return logp.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FORCE_TRANSFORMERS_ENV, "1")
        ref = run(True)
    seen: list[int] = []
    real_call = CompactForward.__call__

    def counting(self, input_ids, *args, **kwargs):
        seen.append(input_ids.shape[0])
        return real_call(self, input_ids, *args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(CompactForward, "__call__", counting)
        shared = run(True)
    assert seen[0] == len(distinct) and set(seen[1:]) <= {len(rows)}
    assert torch.equal(shared[0], ref[0]) and torch.equal(shared[1], ref[1])
    assert not [n for n in ref[2] if not torch.equal(shared[2][n], ref[2][n])]
    full = run(False)
    assert torch.allclose(shared[0][mask], full[0][mask], atol=2e-5, rtol=0)
    assert torch.allclose(shared[1][mask], full[1][mask], atol=2e-5, rtol=0)
    for n, grad in full[2].items():
        assert torch.allclose(shared[2][n], grad, atol=1e-4 * float(grad.abs().max()) + 1e-7, rtol=0), n


@pytest.mark.parametrize("name", ["qwen2", "llama"])
def test_shared_prefill_samples_transformers_tokens(name: str, monkeypatch) -> None:
    """`sample(share_prompts=True)`: a prefill of the distinct prompts, their cache copied to the rows that
    repeat them; the same tokens on both forward paths, and (these seeds) the tokens of a prefill of every row."""
    model = MODELS[name]()
    rows = prompts([5, 9, 7, 9, 3, 8]) * 4
    kwargs = dict(max_new_tokens=16, eos_id=EOS, pad_id=PAD, share_prompts=True)

    def draw(**extra) -> list[list[int]]:
        return generate.sample(model, rows, generator=torch.Generator().manual_seed(5), **{**kwargs, **extra})

    fast = draw()
    assert fast == draw(share_prompts=False)
    assert len({len(r) for r in fast}) > 3  # rows ended at different steps: compaction ran on the shared cache
    monkeypatch.setenv(FORCE_TRANSFORMERS_ENV, "1")
    assert draw() == fast


@pytest.mark.parametrize("name", sorted(MODELS))
def test_with_openblas_products_the_forward_and_gradients_are_transformers_values(name: str) -> None:
    """The trainer's forward (OpenBLAS's products): the update's log-probs, entropy and every gradient within
    float32 rounding of transformers', other bits, and the sampler's tokens where no draw sits on a boundary."""
    assert qwen2_forward.LINEAR is not torch.nn.functional.linear
    model = MODELS[name]().train()
    batch = make_batch(prompts([5, 9, 7, 3]), prompts([3, 5, 1, 4], seed=3), PAD)
    mask = batch.response_mask.bool()

    def run() -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        model.zero_grad()
        logp, entropy = response_logprobs(model, batch, with_entropy=True)
        ((logp * batch.response_mask).sum() + (entropy * batch.response_mask).sum()).backward()
        return logp.detach(), entropy.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FORCE_TRANSFORMERS_ENV, "1")
        ref = run()
    ours = run()
    assert not torch.equal(ours[0][mask], ref[0][mask])  # other kernels, other bits: the control
    assert torch.allclose(ours[0][mask], ref[0][mask], atol=2e-5, rtol=0)
    assert torch.allclose(ours[1][mask], ref[1][mask], atol=2e-5, rtol=0)
    for n, grad in ref[2].items():
        assert torch.allclose(ours[2][n], grad, atol=1e-4 * float(grad.abs().max()) + 1e-7, rtol=0), n
    model.eval()
    rows = prompts([5, 9, 7, 9, 3, 8] * 4)
    kwargs = dict(max_new_tokens=16, eos_id=EOS, pad_id=PAD, generator=None)
    uniforms = torch.rand((len(rows), 16), generator=torch.Generator().manual_seed(6))
    fast = generate.sample(model, rows, uniforms=uniforms, **kwargs)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(FORCE_TRANSFORMERS_ENV, "1")
        assert generate.sample(model, rows, uniforms=uniforms, **kwargs) == fast
