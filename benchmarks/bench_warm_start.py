"""What the tiny-arith warm start leaves for RL to learn, per level: the share of temperature-1 responses
the reward accepts (boxed and correct), the share that is boxed at all, and the share whose answer is right
in either format. Their gap is the part RL can teach in 100 CPU steps (the format); the answer-correct
row is the arithmetic, which it cannot.

Builds each warm start into a throwaway folder (about 100-150 s each on 2 cores), nothing cached is touched:

    python benchmarks/bench_warm_start.py                       # the default spec and unboxed_share 0
    python benchmarks/bench_warm_start.py --unboxed-share 0,0.5,0.7 --problems 40
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np
import torch

from repro.cpu_lm.generate import sample
from repro.cpu_lm.model import TinyModelSpec, new_model, prompt_ids, quiet_transformers, warm_start
from repro.cpu_lm.tokenizer import build_tokenizer
from repro.reward import compute_score, last_boxed
from repro.tasks.tiny_arith import LEVELS, make_problem


def probe(model, tokenizer, problems_per_level: int, samples: int) -> dict[str, list[float]]:
    rng = np.random.default_rng(11)
    rows: dict[str, list[float]] = {"reward (boxed and correct)": [], "boxed": [], "answer correct": []}
    for level in LEVELS:
        problems = [make_problem(rng, level) for _ in range(problems_per_level)] * samples
        ids = [prompt_ids(tokenizer, p.question) for p in problems]
        out = sample(
            model,
            ids,
            max_new_tokens=12,
            eos_id=tokenizer.eos_token_id,
            pad_id=tokenizer.pad_token_id,
            generator=torch.Generator().manual_seed(1),
        )
        texts = tokenizer.batch_decode(out, skip_special_tokens=True)
        boxed = [last_boxed(t) for t in texts]
        rows["reward (boxed and correct)"].append(
            float(np.mean([compute_score("tiny-arith", t, p.answer) for t, p in zip(texts, problems, strict=True)]))
        )
        rows["boxed"].append(float(np.mean([b is not None for b in boxed])))
        answers = [b if b is not None else t.strip() for b, t in zip(boxed, texts, strict=True)]
        rows["answer correct"].append(
            float(np.mean([a.strip() == p.answer for a, p in zip(answers, problems, strict=True)]))
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unboxed-share", default=f"0,{TinyModelSpec().unboxed_share:g}")
    parser.add_argument("--problems", type=int, default=40, help="problems per level")
    parser.add_argument("--samples", type=int, default=8, help="responses per problem")
    args = parser.parse_args()
    quiet_transformers()
    tokenizer = build_tokenizer()
    print(f"levels: {' '.join(f'L{level}' for level in LEVELS)}")
    for share in (float(x) for x in args.unboxed_share.split(",")):
        spec = replace(TinyModelSpec(), unboxed_share=share)
        model = new_model(spec, tokenizer)
        started = time.perf_counter()
        warm_start(model, tokenizer, spec)
        print(f"unboxed_share={share:g}: warm start {time.perf_counter() - started:.0f} s")
        for name, values in probe(model, tokenizer, args.problems, args.samples).items():
            print(f"  {name:28s} " + " ".join(f"{v:.2f}" for v in values))


if __name__ == "__main__":
    main()
