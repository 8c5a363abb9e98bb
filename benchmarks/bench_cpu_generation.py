"""CPU generation before and after compaction, in one run on the same prompts and uniforms.

`old`: the loop as it was: one batch of up to 1024 rows that runs until its last row ends, and a prefill
that projects every prompt position onto the vocabulary. `new`: finished rows dropped from the running
batch (`repro.cpu_lm.generate.sample(compact=True)`), the prefill's logits of the last position only, and
`TransformersGenerator.batch_rows` rows per batch. Both sample by inverse CDF from the same per-row
uniforms (what `repro eval` does), so their responses are the same token ids and the benchmark checks it.

    python benchmarks/bench_cpu_generation.py [--model FOLDER] [--prompts 32] [--samples 4]
        [--max-new-tokens 256] [--threads 1]

Without --model it builds the tiny model (in a temporary REPRO_HOME unless one is set); the real target
is a Hugging Face folder such as SmolLM2-135M-Instruct's.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import tempfile
import time
from pathlib import Path

import torch

from repro import catalog
from repro.cpu_lm.generate import sample
from repro.evaluation.transformers_generator import TransformersGenerator

OPS = (("plus", lambda a, b: a + b), ("minus", lambda a, b: a - b), ("times", lambda a, b: a * b))


class _AllLogits(torch.nn.Module):
    """The model behind a forward without `logits_to_keep`: the old prefill, every position's logits."""

    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=False):
        return self.inner(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            use_cache=use_cache,
        )


def questions(count: int) -> list[str]:
    """Short arithmetic questions in tiny-arith's wording ("What is 7 plus 5?"), deterministic."""
    return [f"What is {3 + (7 * i) % 17} {OPS[i % 3][0]} {2 + (5 * i) % 11}?" for i in range(count)]


def peak_rss_reset() -> None:
    """Hand freed heap back to the OS (glibc's malloc_trim, so one run's freed cache does not count as the
    next one's), then reset the kernel's peak-RSS mark (VmHWM) to the current RSS, where Linux allows it."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def run(
    model: torch.nn.Module,
    gen: TransformersGenerator,
    flat: list[list[int]],
    uniforms: torch.Tensor,
    rows: int,
    compact: bool,
) -> tuple[list[list[int]], float, float]:
    """Responses, seconds and peak RSS (GiB) for `flat` in batches of `rows`."""
    peak_rss_reset()
    start, out = time.perf_counter(), []
    for at in range(0, len(flat), rows):
        out += sample(
            model,
            flat[at : at + rows],
            max_new_tokens=gen.max_new_tokens,
            eos_id=gen.tokenizer.eos_token_id,
            pad_id=gen.tokenizer.pad_token_id,
            generator=None,
            temperature=gen.temperature,
            uniforms=uniforms[at : at + rows],
            compact=compact,
        )
    return out, time.perf_counter() - start, peak_rss_gib()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, help="a Hugging Face model folder (default: the tiny model)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (the ratio is what matters)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.model is None:
        from repro.cpu_lm.model import ensure_tiny_model

        home = Path(os.environ.get("REPRO_HOME") or tempfile.mkdtemp(prefix="bench_home_"))
        args.model, template = ensure_tiny_model(home=home), catalog.prompt_template("tiny")
    else:
        template = catalog.prompt_template("released")
    gen = TransformersGenerator(args.model, args.max_new_tokens, template=template)
    flat = [ids for q in questions(args.prompts) for ids in [gen.prompt_ids(q)] * args.samples]
    uniforms = torch.rand((len(flat), args.max_new_tokens), generator=torch.Generator().manual_seed(args.seed))
    new_rows = gen.batch_rows(max(len(p) for p in flat))
    print(
        f"model {args.model} | {args.prompts} prompts x {args.samples} samples, <= {args.max_new_tokens} new tokens,"
        f" {args.threads} thread(s) | rows per batch: old {min(len(flat), 1024)}, new {min(len(flat), new_rows)}"
    )
    results = {}
    for name, model, rows, compact in (
        ("old", _AllLogits(gen.model), 1024, False),
        ("new", gen.model, new_rows, True),
    ):
        out, seconds, rss = run(model, gen, flat, uniforms, rows, compact)
        tokens = sum(len(r) for r in out)
        results[name] = (out, seconds)
        print(
            f"{name}: {seconds:7.1f} s  {len(out) / seconds:7.2f} responses/s  {tokens / seconds:8.1f} tokens/s"
            f"  peak RSS {rss:5.2f} GiB  (mean {tokens / len(out):.1f}, longest {max(map(len, out))} tokens)"
        )
    (old, t_old), (new, t_new) = results["old"], results["new"]
    same = sum(a == b for a, b in zip(old, new, strict=True))
    print(f"new/old speed: {t_old / t_new:.2f}x | identical responses: {same}/{len(old)}")


if __name__ == "__main__":
    main()
