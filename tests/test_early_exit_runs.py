"""The early exit on the CPU path (issue 46): the sampling loop stops the rows it is told to, leaving every other
row's tokens as they were, and a Seq-balance step under the order-preserving exit keeps, of each prompt's round,
the shortest request-order prefix that meets the rule among the very responses the same step draws without it."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from repro.cli import main
from repro.cpu_lm import generate
from repro.cpu_lm.model import TinyModelSpec, model_folder, prompt_ids
from repro.local import responses
from repro.sampling.early_exit import shortest_meeting_prefix
from repro.sampling.spec import SamplerSpec

QUESTIONS = ["What is 7 plus 5?", "What is 12 times 3?", "What is 40 minus 17?", "What is 3 plus 4 plus 9?"]


def test_the_sampling_loop_stops_cancelled_rows_and_leaves_the_others_as_they_were(tiny_home) -> None:
    folder = model_folder(TinyModelSpec(sft_steps=40, unboxed_share=0.0), tiny_home)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = [prompt_ids(tokenizer, q) for q in QUESTIONS for _ in range(6)]
    uniforms = torch.rand((len(prompts), 24), generator=torch.Generator().manual_seed(3))
    kwargs = dict(max_new_tokens=24, eos_id=tokenizer.eos_token_id, pad_id=tokenizer.pad_token_id, generator=None)
    plain = generate.sample(model, prompts, uniforms=uniforms, temperature=1.5, **kwargs)
    heard: list[int] = []

    def on_finish(finished):  # when row 2k ends, cancel row 2k + 1
        heard.extend(row for row, _ in finished)
        for row, response in finished:
            assert response == plain[row]  # what a row ends with is its response
        return [row + 1 for row, _ in finished if row % 2 == 0]

    cut = generate.sample(model, prompts, uniforms=uniforms, temperature=1.5, on_finish=on_finish, **kwargs)
    cancelled = [row for row in range(1, len(prompts), 2) if len(plain[row - 1]) < len(plain[row])]
    assert len(cancelled) >= 3
    for row in range(len(prompts)):
        if row in cancelled:  # cut where it was when its partner ended: as many tokens, a prefix, no EOS
            assert cut[row] == plain[row][: len(plain[row - 1])] and tokenizer.eos_token_id not in cut[row]
        else:
            assert cut[row] == plain[row]
    assert sorted(heard) == sorted(set(range(len(prompts))) - set(cancelled))  # every other row heard of once


@pytest.fixture(scope="module")
def shipped_home(tmp_path_factory):
    """A REPRO_HOME with the shipped tiny model (a copy, no build) and a training pool of the task's two easiest
    levels (90 problems such as "What is 2 plus 0?"): on the whole pool the model's first-draw reward is 2%
    (the warm-started stand-in of `tiny_home` 0%), so hardly a Seq-balance prompt would decide in round 1."""
    import pandas as pd

    from repro.cpu_lm.model import ensure_tiny_model
    from repro.tasks.tiny_arith import ensure_data

    home = tmp_path_factory.mktemp("shipped_home")
    ensure_tiny_model(home=home)
    train = ensure_data(0, home=home)["train"]
    rows = pd.read_parquet(train)
    rows[rows.extra_info.map(lambda info: info["level"] <= 2)].to_parquet(train)
    return home


def _step_one(method: str, root, monkeypatch) -> tuple[list[dict], list[float], dict]:
    """Step 1 of a CPU run of `method`, 32 prompts: each call of the sampling loop (its prompts, responses and
    the rows it was told to cancel), every reward computed in order, and the step's metrics."""
    calls: list[dict] = []
    scores: list[float] = []
    real, score = generate.sample, responses.compute_score
    monkeypatch.setattr(responses, "compute_score", lambda *a: scores.append(score(*a)) or scores[-1])

    def recording(model, prompts, **kwargs):
        told: set[int] = set()
        hook = kwargs.get("on_finish")
        if hook is not None:
            kwargs["on_finish"] = lambda finished: told.update(out := list(hook(finished))) or out
        responses = real(model, prompts, **kwargs)
        calls.append({"prompts": prompts, "responses": responses, "cancelled": told})
        return responses

    monkeypatch.setattr(responses, "sample", recording)
    args = ["run", "--model", "tiny-arith", "--method", method, "--steps", "1", "--batch", "32"]
    assert main([*args, "--runs-root", str(root)]) == 0
    run = root / f"tiny-arith__{method}__standard__s0"
    lines = (run / "metrics" / "attempt-001.jsonl").read_text().splitlines()
    return calls, scores, json.loads(lines[-1])["data"]


def test_a_seq_balance_step_under_the_exit_keeps_the_shortest_meeting_prefix_of_the_same_draws(
    shipped_home, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("REPRO_HOME", str(shipped_home))
    off, off_scores, off_metrics = _step_one("seq-balance", tmp_path / "off", monkeypatch)
    cut, _, cut_metrics = _step_one("seq-balance-exit", tmp_path / "cut", monkeypatch)
    # round 1 requests the same rows of the same prompts, and the generator is where it was: the same draws
    first_off, first_cut = off[0], cut[0]
    assert first_off["prompts"] == first_cut["prompts"] and len(first_off["prompts"]) == 32 * 8
    spec = SamplerSpec(kind="seq", exit_rule="balance", n=4)
    decided = 0
    for prompt in range(32):
        rows = range(8 * prompt, 8 * prompt + 8)
        keep = shortest_meeting_prefix(spec, np.array([off_scores[r] for r in rows], dtype=float))
        cancelled = {r - rows[0] for r in first_cut["cancelled"] if r in rows}
        if keep is None:  # undecided in round 1: the whole round returns, nothing is cut
            assert not cancelled
            continue
        decided += 1
        assert min(cancelled, default=8) >= keep  # only responses past the kept prefix are cancelled
        for position in range(8):
            row = rows[0] + position
            if position in cancelled:  # a cancelled one is a prefix of the response it would have been
                assert first_off["responses"][row][: len(first_cut["responses"][row])] == first_cut["responses"][row]
            else:
                assert first_cut["responses"][row] == first_off["responses"][row]
    # the tiny model's responses to one problem end in the same decode step as a rule: past the kept prefix they
    # are mostly dropped (back in the same instant), cancelled only when still decoding
    past = cut_metrics["exit/responses_cancelled"] + cut_metrics["exit/responses_dropped"]
    assert decided >= 5 and past >= 5
    # every token decoded counts, the cancelled ones' as far as they got
    assert cut_metrics["tokens/generated"] == sum(len(r) for call in cut for r in call["responses"])
    assert cut_metrics["exit/tokens_cancelled"] == sum(
        len(call["responses"][r]) for call in cut for r in call["cancelled"]
    )
    # rounds decided alike (a prefix meets the rule iff the whole round does), so every round draws alike and the
    # tokens differ by exactly what the cancelled responses did not decode
    assert [call["prompts"] for call in cut] == [call["prompts"] for call in off]
    saved = sum(
        len(off_call["responses"][row]) - len(cut_call["responses"][row])
        for off_call, cut_call in zip(off, cut, strict=True)
        for row in cut_call["cancelled"]
    )
    assert off_metrics["tokens/generated"] - cut_metrics["tokens/generated"] == saved >= 0
    assert "exit/responses_cancelled" not in off_metrics
    # the bias tally: every batch the rule ended keeps a prefix of at least n = 4 under either rule, and round 1's
    # decided prompts are among them
    batches = cut_metrics["exit/decided_batches"]
    assert batches >= decided and cut_metrics["exit/kept_responses"] >= 4 * batches
    assert cut_metrics["exit/first_returned_responses"] >= 4 * batches
    assert 0 <= cut_metrics["exit/kept_reward_sum"] <= cut_metrics["exit/kept_responses"]
