"""A compact forward for transformers' Qwen2 and Llama causal LMs: transformers' ops, without the module machinery.

A transformers forward spends 0.7-1 ms of CPU beyond its kernels (module calls, decorators, mask building,
cache objects, output records); the CPU trainer makes ~65 a step. This module computes the same forward from
the loaded model's own parameters (read, never copied or converted: the model stays an ordinary Hugging Face
checkpoint that transformers, verl and vLLM load) with plain torch calls, and a preallocated KV cache for
decoding. Measured on tiny-arith under the arithmetic pin (CPU ms, transformers -> compact): a decode step of
8 rows 1.2 -> 0.5, of 256 rows 4.2 -> 3.1, a 256-row prefill of 22 tokens 49 -> 43.

The matrix products are the one thing it computes its own way: `LINEAR` (`repro.cpu_lm.blas.linear`, OpenBLAS's
pinned AVX2 kernels, 2-3x the rate of MKL's reproducible SSE2 branch that torch's F.linear runs under the pin).
Those round differently from transformers' products, within float32 rounding of the same sums. Everything
else is transformers' own op sequence, so with `LINEAR = F.linear` the forward and its backward are
transformers' bit for bit (the tests check exactly that): every op is the one transformers' Qwen2 code runs
(transformers 5.x, sdpa attention), on tensors of the same shape, in the same order (autograd accumulates a
tensor's gradients in the order of its uses, so the backward's bits depend on it too). Facts this relies on:

- RMSNorm: `w * (x * rsqrt(mean(x^2) + eps))`; rotary `cos`/`sin` from a batched matmul of
  `inv_freq` by positions (a K=1 product), concatenated with itself; `q*cos + rotate_half(q)*sin`.
- SDPA gets no mask when the 2D padding mask is all ones (then `is_causal` for a multi-token query, and
  grouped-query attention by `enable_gqa`), else a boolean [rows, 1, q, kv] mask `causal & padding` and keys
  and values repeated per query head (`repeat_kv`'s expand+reshape).
- The cache is a concatenation along the sequence: decoding attends to all earlier keys in order. Ours are
  written into a preallocated buffer and read back as a strided view; SDPA's result does not depend on the
  key/value strides (the tests check this bitwise on this torch).
- Shapes are part of the bits: silu's scalar tail differs from its vector body, and a row's product (MKL's
  under the pin, and OpenBLAS's) changes with the number of rows in the matmul. So nothing here changes a
  tensor's shape, and rows repeating one prompt share its forward (`SharedPrompts`: 2.5-3x fewer FLOPs a
  training step) only where the caller asks for those other bits; transformers computes the same sharing
  through its cache.

Anything outside that (another attention implementation, sliding windows, scaled or dynamic rope, weights
in another dtype, hooks, dropout in training, a subclass) returns None from `compact_forward`, and callers
keep transformers' path. `REPRO_TRANSFORMERS_FORWARD=1` forces that path everywhere (the benchmark's
baseline, a bisection aid).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from repro.cpu_lm import blas

FORCE_TRANSFORMERS_ENV = "REPRO_TRANSFORMERS_FORWARD"
# every matrix product of the forward and its backward; tests set torch's F.linear here to compare the rest of the
# forward with transformers' bit for bit
LINEAR = blas.linear


@dataclass(frozen=True)
class _Layer:
    """One decoder layer's parameters (the model's own tensors; biases None where the model has none)."""

    norm1: torch.Tensor
    eps1: float
    q: tuple[torch.Tensor, torch.Tensor | None]
    k: tuple[torch.Tensor, torch.Tensor | None]
    v: tuple[torch.Tensor, torch.Tensor | None]
    o: tuple[torch.Tensor, torch.Tensor | None]
    norm2: torch.Tensor
    eps2: float
    gate: tuple[torch.Tensor, torch.Tensor | None]
    up: tuple[torch.Tensor, torch.Tensor | None]
    down: tuple[torch.Tensor, torch.Tensor | None]


def _linear(m: torch.nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    return m.weight, m.bias


class KVCache:
    """Keys and values of every layer for `rows` sequences, preallocated to `capacity` positions (each
    [rows, kv_heads, capacity, head_dim]). Decoding writes one column a step instead of concatenating a new
    tensor per layer as transformers' `DynamicCache` does. `batch_select_indices` has DynamicCache's name, so
    the sampler's row compaction (`repro.cpu_lm.generate.select_cache_rows`) serves both."""

    def __init__(self, layers: int, rows: int, kv_heads: int, capacity: int, head_dim: int, dtype: torch.dtype):
        shape = (rows, kv_heads, capacity, head_dim)
        self.keys = [torch.empty(shape, dtype=dtype) for _ in range(layers)]
        self.values = [torch.empty(shape, dtype=dtype) for _ in range(layers)]
        self.length = 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor, past: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Writes layer `layer`'s new keys/values after the `past` cached positions; returns what attention
        covers: everything cached, or (the prefill) the new ones themselves, as a concatenation onto nothing
        gives them."""
        keys, values = self.keys[layer], self.values[layer]
        keys.narrow(2, past, k.shape[2]).copy_(k)
        values.narrow(2, past, v.shape[2]).copy_(v)
        if not past:
            return k, v
        length = past + k.shape[2]
        return keys.narrow(2, 0, length), values.narrow(2, 0, length)

    def batch_select_indices(self, keep: torch.Tensor) -> None:
        self.keys = [self._select(k, keep) for k in self.keys]
        self.values = [self._select(v, keep) for v in self.values]

    def _select(self, data: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        """Rows `keep` of `data`, copying only the positions written so far (an eval batch's capacity can be
        thousands of positions, most of them never reached)."""
        out = data.new_empty((len(keep), *data.shape[1:]))
        out.narrow(2, 0, self.length).copy_(data.narrow(2, 0, self.length).index_select(0, keep))
        return out


class SharedPrompts:
    """Keys and values of each distinct prompt, computed once (a prefill of the distinct prompts only) and
    gathered for every row that repeats it (`group`: row -> distinct prompt), with gradients: a training
    batch holds n responses of each prompt, and recomputing the prompt per response was 40-65% of the update's
    tokens on tiny-arith (`repro.cpu_lm.generate.response_logprobs(share_prompts=True)`). The gather and the
    concatenation are the ops transformers' `DynamicCache` runs (`batch_select_indices`, then `update`'s
    `torch.cat`), so the compact and transformers paths keep computing the same bits.

    The first call per layer (`length` 0) records the prefill's keys; later calls attend over the rows'
    prompt keys followed by their own."""

    def __init__(self, group: torch.Tensor) -> None:
        self.group = group
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.length = 0

    def extend(self, layer: int, k: torch.Tensor, v: torch.Tensor, past: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not past:
            self.keys.append(k)
            self.values.append(v)
            return k, v
        return (
            torch.cat([self.keys[layer][self.group, ...], k], dim=-2),
            torch.cat([self.values[layer][self.group, ...], v], dim=-2),
        )


def _ordinary(model: torch.nn.Module) -> bool:
    """Whether `model` computes exactly what this module does: a plain transformers Qwen2/Llama causal LM with
    sdpa attention, full attention in every layer, default rope, SiLU, float32 weights (the dtype the tests
    check; the project trains and evaluates in float32), no hooks, and no dropout in play."""
    if type(model).__name__ not in ("Qwen2ForCausalLM", "LlamaForCausalLM"):  # before importing transformers
        return False
    from transformers import LlamaForCausalLM, Qwen2ForCausalLM

    if type(model) not in (Qwen2ForCausalLM, LlamaForCausalLM):  # a subclass may compute otherwise
        return False
    config = model.config
    rope = getattr(config, "rope_parameters", None) or {}
    if (
        config._attn_implementation != "sdpa"
        or any(t != "full_attention" for t in getattr(config, "layer_types", None) or ())
        or rope.get("rope_type", "default") != "default"
        or model.model.rotary_emb.attention_scaling != 1.0
        or config.hidden_act != "silu"
        or model.model.embed_tokens.weight.dtype != torch.float32
        or not getattr(config, "is_causal", True)
        or len(model.model.layers) != config.num_hidden_layers
        or (model.training and (config.attention_dropout or model.model.gradient_checkpointing))
    ):
        return False
    return not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


class CompactForward:
    """The forward of a loaded Qwen2/Llama causal LM in plain torch calls; see the module docstring."""

    def __init__(self, model: torch.nn.Module) -> None:
        inner = model.model
        attn = inner.layers[0].self_attn
        self.heads = model.config.num_attention_heads
        self.kv_heads = model.config.num_key_value_heads
        self.head_dim = attn.head_dim
        self.scaling = attn.scaling
        self.embed = inner.embed_tokens.weight
        self.padding_idx = inner.embed_tokens.padding_idx
        self.inv_freq = inner.rotary_emb.inv_freq
        self.layers = [
            _Layer(
                layer.input_layernorm.weight,
                layer.input_layernorm.variance_epsilon,
                _linear(layer.self_attn.q_proj),
                _linear(layer.self_attn.k_proj),
                _linear(layer.self_attn.v_proj),
                _linear(layer.self_attn.o_proj),
                layer.post_attention_layernorm.weight,
                layer.post_attention_layernorm.variance_epsilon,
                _linear(layer.mlp.gate_proj),
                _linear(layer.mlp.up_proj),
                _linear(layer.mlp.down_proj),
            )
            for layer in inner.layers
        ]
        self.norm, self.norm_eps = inner.norm.weight, inner.norm.variance_epsilon
        self.head = _linear(model.lm_head)
        self.linear = LINEAR

    def new_cache(self, rows: int, capacity: int) -> KVCache:
        return KVCache(len(self.layers), rows, self.kv_heads, capacity, self.head_dim, self.embed.dtype)

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: KVCache | SharedPrompts | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Logits [rows, q, vocab] (q = 1 with `last_only`, as transformers' `logits_to_keep=1`) of `input_ids`
        [rows, q] at `position_ids`, attending over `attention_mask` [rows, cached + q] (1 = a real token).
        With `cache`, the new keys/values are appended to it and attention covers everything cached."""
        rows, q_len = input_ids.shape
        past = 0 if cache is None else cache.length
        kv_len = past + q_len
        padding = attention_mask.to(dtype=torch.bool)
        if bool(padding.all()) and (past == 0 or q_len == 1):  # no mask: SDPA's causal flag, or nothing (decoding)
            mask = None
        elif q_len == 1:  # one query after everything cached: causality masks nothing
            mask = padding[:, None, None, :]
        else:
            causal = torch.arange(kv_len)[None, None, None, :] <= (torch.arange(q_len) + past)[None, None, :, None]
            mask = causal & padding[:, None, None, :]
        cos, sin = self._rotary(position_ids)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        h = F.embedding(input_ids, self.embed, self.padding_idx)
        for i, layer in enumerate(self.layers):
            residual = h
            x = _rms_norm(h, layer.norm1, layer.eps1)
            shape = (rows, q_len, -1, self.head_dim)
            q = self.linear(x, *layer.q).view(shape).transpose(1, 2)
            k = self.linear(x, *layer.k).view(shape).transpose(1, 2)
            v = self.linear(x, *layer.v).view(shape).transpose(1, 2)
            q = (q * cos) + (_rotate_half(q) * sin)
            k = (k * cos) + (_rotate_half(k) * sin)
            if cache is not None:
                k, v = cache.extend(i, k, v, past)
            a = self._attend(q, k, v, mask)
            a = a.transpose(1, 2).contiguous().reshape(rows, q_len, -1).contiguous()
            h = residual + self.linear(a, *layer.o)
            residual = h
            x = _rms_norm(h, layer.norm2, layer.eps2)
            x = self.linear(F.silu(self.linear(x, *layer.gate)) * self.linear(x, *layer.up), *layer.down)
            h = residual + x
        if cache is not None:
            cache.length = kv_len
        h = _rms_norm(h, self.norm, self.norm_eps)
        return self.linear(h[:, -1:, :] if last_only else h, *self.head)

    def _rotary(self, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            # transformers then multiplies by the rope's attention scaling, 1.0 for the default rope: x * 1.0 is x
            return emb.cos(), emb.sin()

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        if mask is None:
            is_causal = q.shape[2] > 1
            return F.scaled_dot_product_attention(q, k, v, scale=self.scaling, is_causal=is_causal, enable_gqa=True)
        groups = self.heads // self.kv_heads
        if groups > 1:
            k, v = _repeat_kv(k, groups), _repeat_kv(v, groups)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling, is_causal=False)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' RMSNorm on float32 input (its casts to and from float32 are then no-ops)."""
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    first, second = x[..., :half], x[..., half:]  # transformers' order: x's gradients are summed in use order
    return torch.cat((-second, first), dim=-1)


def _repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    rows, kv_heads, length, dim = x.shape
    return x[:, :, None, :, :].expand(rows, kv_heads, groups, length, dim).reshape(rows, kv_heads * groups, length, dim)


def compact_forward(model: torch.nn.Module) -> CompactForward | None:
    """The compact forward of `model`, or None where it would not compute transformers' bits (or is turned off
    by REPRO_TRANSFORMERS_FORWARD=1): the caller then calls the model itself. Built per call site, from the
    model's current parameters (an optimizer step updates them in place; a restore replaces the model)."""
    if os.environ.get(FORCE_TRANSFORMERS_ENV, "").strip() not in ("", "0") or not _ordinary(model):
        return None
    return CompactForward(model)
