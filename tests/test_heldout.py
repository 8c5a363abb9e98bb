"""Held-out accuracy during CPU training (repro.local.heldout): what it scores, that it matches `repro eval`'s
own generator and grader on the same problems and checkpoint, and that it leaves training untouched."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from repro.cell import resolve_cell
from repro.cli import main
from repro.errors import ReproError
from repro.local import heldout
from repro.local.config import CpuTrainConfig

STEPS = 3


def _metrics(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics" / "attempt-001.jsonl").read_text().splitlines()
    return {record["step"]: record["data"] for record in map(json.loads, lines)}


def _training_only(data: dict) -> dict:
    """A step's metrics less the held-out ones and the wall-clock timings (which no two runs share)."""
    return {k: v for k, v in data.items() if not k.startswith(("heldout/", "timing_s/"))}


@pytest.fixture(scope="module")
def runs(tiny_home, tmp_path_factory) -> Path:
    """Two seq-balance runs of 3 steps x 8 prompts, one scoring the held-out set every 2 steps, one never."""

    root = tmp_path_factory.mktemp("heldout_runs")
    with pytest.MonkeyPatch.context() as env:  # the session fixtures cannot take monkeypatch
        env.setenv("REPRO_HOME", str(tiny_home))
        for name, every in (("on", 2), ("off", 0)):
            argv = ["run", "--model", "tiny-arith", "--method", "seq-balance", "--steps", str(STEPS), "--batch", "8"]
            assert main([*argv, "--set", f"eval_every={every}", "--run-dir", str(root / name)]) == 0
    return root


def test_eval_steps_and_seeds_are_fixed_by_step_alone():
    assert [s for s in range(1, 26) if heldout.is_eval_step(s, 10, 25)] == [1, 10, 20, 25]
    assert [s for s in range(1, 4) if heldout.is_eval_step(s, 2, 3)] == [1, 2, 3]
    assert not any(heldout.is_eval_step(s, 0, 25) for s in range(1, 26))
    assert heldout.heldout_seed(0, 10) == heldout.heldout_seed(0, 10)
    assert len({heldout.heldout_seed(seed, step) for seed in range(3) for step in range(1, 50)}) == 3 * 49


def test_defaults_and_bad_settings():
    cfg = CpuTrainConfig.from_settings(resolve_cell("tiny-arith", "grpo-n4").hyperparameters, {})
    assert (cfg.eval_every, cfg.heldout_per_tier, cfg.heldout_samples) == (10, 16, 4)
    for bad in ({"eval_every": -1}, {"heldout_samples": 0}, {"heldout_per_tier": 47}):
        with pytest.raises(ReproError, match="held-out evaluation needs"):
            CpuTrainConfig.from_settings(resolve_cell("tiny-arith", "grpo-n4").hyperparameters, bad)


def test_the_heldout_set_is_16_problems_of_each_tier_and_none_is_trained_on(tiny_env):
    from repro.tasks import tiny_arith

    problems = heldout.heldout_problems(16)
    assert len(problems) == 64
    assert [p.benchmark for p in problems[::16]] == list(tiny_arith.TIERS)
    train = pd.read_parquet(tiny_arith.ensure_data(0)["train"])
    trained = {row["prompt"][-1]["content"] for row in train.to_dict("records")}
    assert not trained & {p.question for p in problems}


def test_heldout_eval_leaves_the_training_trajectory_unchanged(runs):
    on, off = _metrics(runs / "on"), _metrics(runs / "off")
    assert sorted(on) == sorted(off) == [1, 2, 3]
    for step in on:
        assert _training_only(on[step]) == _training_only(off[step]), step  # every training metric, exactly
        assert not any(k.startswith("heldout/") for k in off[step])
        assert on[step]["heldout/n"] == 64 * 4 and on[step]["heldout/problems"] == 64
        assert 0.0 <= on[step]["heldout/accuracy"] <= 1.0
    from safetensors.torch import load_file

    a, b = (
        load_file(runs / r / "checkpoints" / f"global_step_{STEPS}" / "model" / "model.safetensors")
        for r in ("on", "off")
    )
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    config = (runs / "on" / "config.yaml").read_text()
    assert "eval_every: 2" in config and "heldout_per_tier: 16" in config and "heldout_samples: 4" in config


def test_heldout_accuracy_matches_the_eval_generator_and_grader_on_the_checkpoint(runs, tiny_env):
    """Recomputed with `repro eval`'s pieces: its benchmark loader, TransformersGenerator on the saved
    checkpoint of the last step, and the Grader in the tiers' grading mode (worker process, "reward")."""
    from repro.evaluation.benchmarks import load
    from repro.evaluation.grading import Grader, benchmark_grading
    from repro.evaluation.transformers_generator import TransformersGenerator
    from repro.prompting import template_for
    from repro.tasks import tiny_arith

    logged = _metrics(runs / "on")[STEPS]
    problems = [p for tier in tiny_arith.TIERS for p in load(tier)[:16]]
    generator = TransformersGenerator(
        runs / "on" / "checkpoints" / f"global_step_{STEPS}" / "model",
        max_new_tokens=16,
        template=template_for("tiny-arith"),
    )
    texts = generator.generate([p.problem for p in problems], 4, seed=heldout.heldout_seed(0, STEPS))
    assert {benchmark_grading(t) for t in tiny_arith.TIERS} == {"reward"}
    with Grader() as grader:
        grades = grader.grade_many(
            [(t, p.answer) for p, group in zip(problems, texts, strict=True) for t in group], "reward"
        )
        expected = sum(g.score for g in grades) / len(grades)
        assert len(grades) == logged["heldout/n"] == 256
        assert logged["heldout/accuracy"] == pytest.approx(expected, abs=1e-12)
        # a 40-step warm start gets almost everything wrong, so the grading is also checked where it matters:
        # right and wrong boxed answers to the same problems, the trainer's in-process score vs the Grader
        made = [(f"so \\boxed{{{p.answer}}}", p.answer) for p in problems]
        made += [(f"\\boxed{{{int(p.answer) + 1}}}", p.answer) for p in problems] + [("no box", "3")]
        made += [(f"\\boxed{{{p.answer}}}}}", p.answer) for p in problems]  # a stray brace: the reward pays
        by_grader = [g.score for g in grader.grade_many(made, "reward")]
        strict = [g.score for g in grader.grade_many(made[-64:], "boxed")]
    assert by_grader == [heldout.score(t, a) for t, a in made]
    assert by_grader == [1.0] * 64 + [0.0] * 65 + [1.0] * 64
    assert strict == [0.0] * 64  # the released extractor: an unmatched } means no answer


def test_collect_puts_heldout_accuracy_in_the_training_table(runs, tmp_path):
    from repro.report.collect import collect
    from repro.report.results_files import read_results

    collect(runs, tmp_path / "results")
    training = read_results(tmp_path / "results")["training"]
    for name, every in (("on", 2), ("off", 0)):
        rows = training[training["run"] == name].sort_values("step")
        logged = _metrics(runs / name)
        for step, value in zip(rows["step"], rows["heldout/accuracy"], strict=True):
            if every:
                assert value == logged[int(step)]["heldout/accuracy"]
            else:
                assert math.isnan(value)
