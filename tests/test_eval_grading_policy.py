"""`repro eval --grading`: the released eval grades Minerva Math with Qwen2.5-Math's grader by default, and
math-verify on the last box when asked; a change of policy re-grades saved responses, never regenerates."""

from __future__ import annotations

import json
from pathlib import Path

from repro.cli import main
from repro.cpu_lm.model import TinyModelSpec, model_folder


class _Unboxed:
    """Answers every problem right but without a box, the way Minerva's few-shot format does."""

    def __init__(self, answers: dict[str, str]) -> None:
        self.answers, self.calls = answers, 0

    def generate(self, problems, n, seed):
        self.calls += 1
        return [[f"Adding them up, the answer is {self.answers[p]}."] * n for p in problems]


def test_minerva_is_graded_by_the_released_toolkit_unless_asked_otherwise(tiny_env, monkeypatch, tmp_path) -> None:
    rows = [{"problem": f"What is {i} plus {i}?", "answer": str(2 * i)} for i in range(272)]  # Minerva's size
    minerva = tmp_path / "minerva.jsonl"
    minerva.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fake = _Unboxed({r["problem"]: r["answer"] for r in rows})
    monkeypatch.setattr("repro.evaluation.backends.make_generator", lambda *_a, **_k: fake)
    model = model_folder(TinyModelSpec(), Path(tiny_env["REPRO_HOME"]))
    out = tmp_path / "eval"
    args = [
        "eval", str(model), "--benchmarks", "minerva_math", "--benchmark-file", f"minerva_math={minerva}",
        "--k", "2", "--pass-k", "1", "--out", str(out),
    ]  # fmt: skip
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["grading_policy"] == "released" and summary["grading_modes"] == {"minerva_math": "qwen-math"}
    assert summary["benchmarks"]["minerva_math"]["ave_at_k"] == 1.0  # "the answer is N" extracts N
    assert main([*args, "--grading", "math-verify"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["grading_modes"] == {"minerva_math": "boxed"}
    assert summary["benchmarks"]["minerva_math"]["ave_at_k"] == 0.0  # no box, no answer
    assert fake.calls == 272 // 16  # generated once (17 chunks of 16), re-graded the second time
    records = [json.loads(line) for line in (out / "minerva_math.jsonl").read_text().splitlines()]
    assert len(records) == 544 and {r["grading"] for r in records} == {"boxed"}


def test_an_unknown_grading_policy_is_one_line(tiny_env, capsys) -> None:
    model = model_folder(TinyModelSpec(), Path(tiny_env["REPRO_HOME"]))
    assert main(["eval", str(model), "--grading", "exact"]) == 2
    assert "unknown --grading 'exact'; valid: released, math-verify" in capsys.readouterr().err
