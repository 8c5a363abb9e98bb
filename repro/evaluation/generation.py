"""Generation backends behind one interface: vLLM (on GPUs, or on CPUs through PyPI's CPU build), and
transformers on CPUs.

Both build a problem's prompt the same way, as token ids (`prompt_token_ids`: the model's own chat
template over the backbone's prompt template, `repro.prompting`, tokenized once by
`apply_chat_template(tokenize=True)`: the same chat as training and the difficulty filter), and sample
with temperature 1.0, top-p 1.0; `max_new_tokens` is 4096 for the paper's models and the tiny model's own
cap on CPU. A backend returns `n` response texts per prompt, in order.

Seeds. `generate_seeded(problems, seeds)` takes one seed per (problem, sample): `sample_seed(seed,
benchmark, problem_id, sample_index)`, a hash of the four into 63 bits, so a sample's seed does not depend
on which chunk, shard or resumed run draws it (`repro.evaluation.runner.evaluate_benchmark` passes them).
`generate(problems, n, seed)` is the older call (the difficulty filter, the held-out check): it derives
per-sample seeds from `seed` and each problem's position in the call.

The backends themselves are `transformers_generator.TransformersGenerator` and `vllm_generator.VLLMGenerator`
(its engine's start and failures in `vllm_engine`); `backends.make_generator` picks one by name.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from repro import catalog
from repro.prompting import chat_messages

DEFAULT_TEMPLATE = "released"  # the paper's models; the tiny model's callers pass its own
SEED_BITS = 63  # fits torch's and vLLM's seed range (torch.Generator.manual_seed takes < 2**64) with room


@runtime_checkable
class Generator(Protocol):
    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]: ...


@runtime_checkable
class SeededGenerator(Generator, Protocol):
    def generate_seeded(self, problems: Sequence[str], seeds: Sequence[Sequence[int]]) -> list[list[str]]: ...


def sample_seed(seed: int, benchmark: str, problem_id: str, sample_index: int) -> int:
    """The seed of sample `sample_index` of problem `problem_id` of `benchmark` under `--seed seed`.

    blake2b (8-byte digest, personalised "repro-eval") of the compact JSON `[seed, benchmark, problem_id,
    sample_index]`, shifted right one bit: a 63-bit non-negative integer. Distinct inputs give distinct
    seeds except with probability ~ N^2 / 2^64 (N samples), and the value is the same on every machine,
    Python version and chunking (no `hash()` randomisation, no position in a batch)."""
    key = json.dumps([int(seed), str(benchmark), str(problem_id), int(sample_index)], separators=(",", ":"))
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"repro-eval").digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def sample_seeds(seed: int, benchmark: str, problem_id: str, n: int) -> list[int]:
    """`sample_seed` of samples 0 .. n-1 of one problem."""
    return [sample_seed(seed, benchmark, problem_id, j) for j in range(n)]


def _call_seeds(n_problems: int, n: int, seed: int) -> list[list[int]]:
    """Per-sample seeds for the positional `generate(problems, n, seed)` call."""
    return [sample_seeds(seed, "generate-call", f"#{i}", n) for i in range(n_problems)]


def generate_with_seeds(
    generator: Generator, problems: Sequence[str], seeds: Sequence[Sequence[int]], fallback_seed: int
) -> list[list[str]]:
    """`generator.generate_seeded(problems, seeds)`, or for a generator without it (a test's stand-in) the
    positional `generate(problems, n, fallback_seed)`."""
    if isinstance(generator, SeededGenerator):
        return generator.generate_seeded(problems, seeds)
    n = len(seeds[0]) if seeds else 0
    return generator.generate(problems, n, fallback_seed)


def prompt_token_ids(tokenizer: Any, problem: str, template: catalog.PromptTemplate) -> list[int]:
    """A problem's prompt as the model sees it, for both backends: the chat template applied and tokenized
    in one step (`tokenize=True`), so the tokenizer adds nothing of its own. (Rendering to text and letting
    an engine tokenize it again adds the tokenizer's special tokens a second time: Llama 3's template
    writes `<|begin_of_text|>` and its tokenizer prepends another.) transformers 5 returns a BatchEncoding;
    older versions, and `return_dict=False`, a list of ids."""
    encoded = tokenizer.apply_chat_template(chat_messages(problem, template), add_generation_prompt=True, tokenize=True)
    if isinstance(encoded, Mapping) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    ids = list(encoded)
    if ids and isinstance(ids[0], list | tuple):  # a batch of one
        if len(ids) != 1:
            raise ValueError(f"expected the ids of one conversation, got a batch of {len(ids)}")
        ids = list(ids[0])
    return [int(t) for t in ids]


def _template(template: catalog.PromptTemplate | None) -> catalog.PromptTemplate:
    return template if template is not None else catalog.prompt_template(DEFAULT_TEMPLATE)


def _regroup(texts: list[str], sizes: Sequence[int]) -> list[list[str]]:
    """A flat list of responses back into one list per problem (`sizes`: samples of each, in order)."""
    out, at = [], 0
    for size in sizes:
        out.append(texts[at : at + size])
        at += size
    return out
