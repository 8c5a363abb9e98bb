"""The tiny-arith task, the reward function, the tokenizer and the tiny model folder."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from repro import catalog
from repro.cpu_lm.model import TinyModelSpec, model_folder
from repro.reward import compute_score, last_boxed
from repro.tasks import tiny_arith as ta


def test_every_answer_is_correct_by_the_reward_function() -> None:
    data = ta.build(seed=3, train_scale=0.1)
    problems = data.train + [p for tier in data.tiers.values() for p in tier]
    for p in problems:
        expected = p.a + p.b if p.op == "+" else p.a - p.b if p.op == "-" else p.a * p.b
        assert int(p.answer) == expected
        assert f"{p.a} {ta.WORDS[p.op]} {p.b}" in p.question
        assert compute_score("tiny-arith", f"so \\boxed{{{p.answer}}}", p.answer) == 1.0
        assert compute_score("tiny-arith", f"\\boxed{{{int(p.answer) + 1}}}", p.answer) == 0.0


def test_levels_digits_and_operations() -> None:
    rng = np.random.default_rng(0)
    for level, (da, db, op) in ta.LEVELS.items():
        for _ in range(50):
            p = ta.make_problem(rng, level)
            assert p.op == op and len(str(p.a)) == da and len(str(p.b)) == db
            if level == 2:
                assert int(p.answer) >= 0


def test_tiers_sizes_held_out_and_deterministic() -> None:
    a, b = ta.build(seed=1, train_scale=0.1), ta.build(seed=1, train_scale=0.1)
    assert {k: len(v) for k, v in a.tiers.items()} == {
        "tiny-math500": 100,
        "tiny-minerva": 54,
        "tiny-olympiad": 135,
        "tiny-aime": 46,
    }
    assert [p.question for p in a.train] == [p.question for p in b.train]
    test_questions = {p.question for tier in a.tiers.values() for p in tier}
    assert not test_questions & {p.question for p in a.train}
    assert len(test_questions) == 335  # distinct across tiers too
    for name, tier in a.tiers.items():
        assert {p.level for p in tier} <= set(ta.TIERS[name]["levels"])
    assert ta.build(seed=2, train_scale=0.1).train[0].question != a.train[0].question


def test_parquet_rows_in_verl_format(tmp_path) -> None:
    files = ta.write_parquet(ta.build(seed=0, train_scale=0.01), tmp_path)
    assert set(files) == {"train", *ta.TIERS}
    frame = pd.read_parquet(files["train"])
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    row = frame.iloc[0]
    assert row["data_source"] == "tiny-arith" and row["ability"] == "math"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["prompt"][0]["content"] == catalog.prompt_template("tiny").system
    assert row["reward_model"]["style"] == "rule"
    assert (
        compute_score("x", f"\\boxed{{{row['reward_model']['ground_truth']}}}", row["reward_model"]["ground_truth"])
        == 1
    )
    assert row["extra_info"]["split"] == "train" and row["extra_info"]["index"] == 0
    assert len(pd.read_parquet(files["tiny-aime"])) == 46
    assert not list(tmp_path.glob(".*.tmp"))


@pytest.mark.parametrize(
    ("text", "boxed"),
    [
        ("\\boxed{3} then \\boxed{4}", "4"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("no answer", None),
        ("\\boxed{12", None),
        ("\\boxed{7} and a broken \\boxed{8", "7"),
    ],
)
def test_last_boxed(text: str, boxed: str | None) -> None:
    assert last_boxed(text) == boxed


def test_reward_uses_math_equivalence_and_never_raises() -> None:
    assert compute_score("x", "\\boxed{\\frac{1}{2}}", "0.5") == 1.0
    assert compute_score("x", "\\boxed{0.5}", "\\frac{1}{2}") == 1.0
    assert compute_score("x", "the answer is 82", "82") == 0.0  # no box, no credit
    assert compute_score("x", "\\boxed{\\frac{}{}}}{", "1") == 0.0


def test_tokenizer_round_trip_and_reload(tmp_path) -> None:
    from transformers import AutoTokenizer, Qwen2Config

    from repro.cpu_lm.tokenizer import CHARS, build_tokenizer

    tok = build_tokenizer()
    text = "What is 37 minus 45?\n\\boxed{-8} " + CHARS
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text
    tok.save_pretrained(tmp_path)
    Qwen2Config(vocab_size=len(tok)).save_pretrained(tmp_path)  # reload the way a model folder is read
    again = AutoTokenizer.from_pretrained(tmp_path)
    assert again(text, add_special_tokens=False)["input_ids"] == ids
    prompt = again.apply_chat_template(
        [
            {"role": "system", "content": catalog.prompt_template("tiny").system},
            {"role": "user", "content": "What is 1 plus 2?"},
        ],
        add_generation_prompt=True,
        tokenize=False,
    )
    assert prompt == "<s>What is 1 plus 2?\n"


def test_model_folder_loads_with_auto_classes(tiny_home) -> None:
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from repro.cpu_lm.generate import sample
    from repro.cpu_lm.model import prompt_ids

    folder = model_folder(TinyModelSpec(), tiny_home)
    assert (folder / "COMPLETE").exists()
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["architectures"] == ["Qwen2ForCausalLM"]
    model = AutoModelForCausalLM.from_pretrained(folder)
    tok = AutoTokenizer.from_pretrained(folder)
    assert (
        sum(p.numel() for p in model.parameters())
        == json.loads((folder / "repro_build.json").read_text())["parameters"]
    )
    out = sample(
        model,
        [prompt_ids(tok, "What is 2 plus 2?")] * 3,
        max_new_tokens=8,
        eos_id=tok.eos_token_id,
        pad_id=tok.pad_token_id,
        generator=torch.Generator().manual_seed(0),
    )
    assert len(out) == 3 and all(1 <= len(r) <= 8 for r in out)
    build = json.loads((folder / "repro_build.json").read_text())
    probe = build["pass_rate_probe"]
    assert probe["zero"] + probe["one"] + probe["strictly_between"] == pytest.approx(1.0)
    assert sum(build["histogram"]) == probe["problems"]


def test_reward_works_off_the_main_thread() -> None:
    """verl calls reward functions from executor threads, where math-verify's SIGALRM timeouts cannot run."""
    from concurrent.futures import ThreadPoolExecutor

    from repro import reward

    reward.clear_cache()
    with ThreadPoolExecutor(2) as pool:
        scores = list(pool.map(lambda a: compute_score("x", f"\\boxed{{{a}}}", "12"), ["12", "13", "24/2"]))
    assert scores == [1.0, 0.0, 1.0]
    assert compute_score("x", "\\boxed{12}", "12") == 1.0  # and nothing wrong was memoised
