"""`repro eval` and `repro data filter` on the tiny model: records, resume, size checks, stage counts."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from repro import arithmetic, catalog
from repro.cli import main
from repro.cpu_lm.model import TinyModelSpec, model_folder
from repro.errors import ReproError
from repro.evaluation import benchmarks as bench
from repro.evaluation.runner import evaluate_benchmark, read_records


def test_tiny_tiers_load_with_their_sizes(tiny_env) -> None:
    for name, size in {"tiny-math500": 100, "tiny-minerva": 54, "tiny-olympiad": 135, "tiny-aime": 46}.items():
        problems = bench.load(name)
        assert len(problems) == size and len({p.problem_id for p in problems}) == size
        assert all(p.answer.lstrip("-").isdigit() for p in problems)


def test_size_check_fires_and_hub_errors_name_the_flag(tmp_path, monkeypatch) -> None:
    path = tmp_path / "math500.jsonl"
    path.write_text("\n".join(json.dumps({"problem": f"p{i}", "answer": str(i), "unique_id": i}) for i in range(499)))
    with pytest.raises(ReproError, match="math500 has 499 problems, expected 500"):
        bench.load("math500", path)
    path.write_text("\n".join(json.dumps({"problem": f"p{i}", "answer": str(i), "unique_id": i}) for i in range(500)))
    assert len(bench.load("math500", path)) == 500
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    import datasets.config
    import huggingface_hub.constants

    # the libraries read those variables at import, and the suite imported them already: without this,
    # each Hub id is retried with backoff (about 30 s) before it fails
    for module, name in ((datasets.config, "HF_HUB_OFFLINE"), (huggingface_hub.constants, "HF_HUB_OFFLINE")):
        if hasattr(module, name):
            monkeypatch.setattr(module, name, True)
    tried = r"tried weqweasdas/minerva_math \(\w+\); math-ai/minervamath \(\w+\)\)"  # released copy first
    with pytest.raises(ReproError, match=rf"cannot load minerva_math .*{tried}.*--benchmark-file minerva_math=PATH"):
        bench.load("minerva_math")
    with pytest.raises(ReproError, match="unknown benchmark 'gsm8k'"):
        bench.expected_size("gsm8k")


class CountingGenerator:
    """Wraps a real generator and fails on demand, to interrupt an evaluation half way."""

    def __init__(self, inner, fail_after: int | None = None) -> None:
        self.inner, self.fail_after, self.problems_generated = inner, fail_after, 0

    def generate(self, problems, n, seed):
        if self.fail_after is not None and self.problems_generated >= self.fail_after:
            raise KeyboardInterrupt
        self.problems_generated += len(problems)
        return self.inner.generate(problems, n, seed)


def test_eval_resumes_without_regenerating(tiny_env, tmp_path) -> None:
    from repro.evaluation.grading import Grader
    from repro.evaluation.transformers_generator import TransformersGenerator

    model = model_folder(TinyModelSpec(), Path(tiny_env["REPRO_HOME"]))
    problems = bench.load("tiny-aime")[:40]
    out = tmp_path / "tiny-aime.jsonl"
    with Grader(timeout_s=5) as grader:
        first = CountingGenerator(
            TransformersGenerator(model, 16, template=catalog.prompt_template("tiny")), fail_after=16
        )
        with pytest.raises(KeyboardInterrupt):
            evaluate_benchmark(problems, 4, first, grader, out, seed=0, chunk=8)
        done, _ = read_records(out)
        assert len(done) == 16 * 4
        with open(out, "a") as handle:
            handle.write('{"benchmark": "tiny-aime", "problem_id": "torn"')  # a kill mid-write
        second = CountingGenerator(TransformersGenerator(model, 16, template=catalog.prompt_template("tiny")))
        records = evaluate_benchmark(problems, 4, second, grader, out, seed=0, chunk=8)
    assert second.problems_generated == 40 - 16  # finished problems are not regenerated
    assert len(records) == 160
    on_disk, bad = read_records(out)
    assert bad == 0 and len(on_disk) == 160
    assert {(r["problem_id"], r["sample_index"]) for r in on_disk} == {
        (p.problem_id, j) for p in problems for j in range(4)
    }
    assert {r["outcome"] for r in on_disk} <= {"correct", "wrong", "no_boxed", "parse_failed", "timeout", "error"}
    assert all(r["score"] == (1.0 if r["outcome"] == "correct" else 0.0) for r in on_disk)


def test_eval_cli_on_a_run_writes_records_and_summary(tiny_env, tmp_path, capsys) -> None:
    run = tmp_path / "run"
    assert (
        main(
            [
                "run",
                "--model",
                "tiny-arith",
                "--method",
                "grpo-n4",
                "--steps",
                "2",
                "--batch",
                "8",
                "--run-dir",
                str(run),
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["eval", str(run), "--benchmarks", "tiny-minerva,tiny-aime", "--k", "4", "--pass-k", "1,2,4"]) == 0
    out = capsys.readouterr().out
    assert "weighted average" in out and "Ave@4" in out
    summary = json.loads((run / "eval" / "global_step_2" / "summary.json").read_text())
    records = {b: read_records(run / "eval" / "global_step_2" / f"{b}.jsonl")[0] for b in ("tiny-minerva", "tiny-aime")}
    for name, recs in records.items():
        assert len(recs) == {"tiny-minerva": 54, "tiny-aime": 46}[name] * 4
        ave = sum(r["score"] for r in recs) / len(recs)
        assert summary["benchmarks"][name]["ave_at_k"] == pytest.approx(ave)
    expected = (
        54 * summary["benchmarks"]["tiny-minerva"]["ave_at_k"] + 46 * summary["benchmarks"]["tiny-aime"]["ave_at_k"]
    ) / 100
    assert summary["weighted_average"] == pytest.approx(expected)
    assert sum(summary["grading"].values()) == 400


def test_eval_bad_targets(tmp_path, capsys) -> None:
    assert main(["eval", str(tmp_path)]) == 2
    assert "neither a run folder" in capsys.readouterr().err


def test_data_filter_on_tiny_arith_counts_and_resumes(tiny_env, tmp_path, capsys) -> None:
    out = tmp_path / "filtered"
    args = ["data", "filter", "--base-samples", "8", "--pass-rate", "0.5", "--limit", "120", "--out", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    stages = summary["stages"]
    assert stages["loaded"] == 3950 and stages["after_limit"] == 120 and stages["reference_verifies"] == 120
    assert stages["kept"] == 120 - stages["all_wrong_dropped"] - stages["too_easy_dropped"]
    assert sum(summary["pass_count_histogram"]) == 120
    hist = summary["pass_count_histogram"]
    assert stages["all_wrong_dropped"] == hist[0] and stages["too_easy_dropped"] == sum(hist[5:])
    train, val = pd.read_parquet(out / "train.parquet"), pd.read_parquet(out / "val.parquet")
    assert len(train) + len(val) == stages["kept"] == summary["split"]["train"] + summary["split"]["val"]
    assert list(train.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    lines = (out / "samples.jsonl").read_text().splitlines()
    counts = {json.loads(line)["key"]: json.loads(line)["correct"] for line in lines}
    kept_keys = [row["key"] for row in train["extra_info"]] + [row["key"] for row in val["extra_info"]]
    assert all(0 < counts[k] <= 4 for k in kept_keys)
    lines_before = (out / "samples.jsonl").read_text()
    capsys.readouterr()
    assert main(args) == 0  # resumes: nothing sampled again, same result
    assert (out / "samples.jsonl").read_text() == lines_before
    assert json.loads((out / "summary.json").read_text())["stages"] == stages


def test_a_second_prompt_set_reuses_the_first_sets_pass_counts(tiny_env, tmp_path, monkeypatch) -> None:
    """The hard set after the standard set samples nothing: same model, samples and seed; the counts it
    keeps follow its own threshold. Another seed samples again."""
    from repro.evaluation import backends

    calls: list[int] = []
    real = backends.make_generator

    def counting(*args, **kwargs):
        gen = real(*args, **kwargs)
        inner = gen.generate

        def generate(problems, samples, seed):
            calls.append(len(problems))
            return inner(problems, samples, seed)

        gen.generate = generate
        return gen

    monkeypatch.setattr(backends, "make_generator", counting)
    monkeypatch.setattr(arithmetic, "usable_cores", lambda: 1)  # sampled here, not by worker processes, to count
    base = ["data", "filter", "--base-samples", "8", "--limit", "100"]
    standard, hard = tmp_path / "tiny-arith-standard", tmp_path / "tiny-arith-hard"
    assert main([*base, "--pass-rate", "0.5", "--out", str(standard)]) == 0
    assert sum(calls) == 100
    assert main([*base, "--pass-rate", "0.25", "--out", str(hard)]) == 0
    assert sum(calls) == 100  # nothing sampled for the second set
    records = [json.loads(line) for line in (standard / "samples.jsonl").read_text().splitlines()]
    assert {r["samples"] for r in records} == {8} and {r["seed"] for r in records} == {0}
    assert {r["model"] for r in records} == {model_folder(TinyModelSpec()).name}
    counts = {r["key"]: r["correct"] for r in records}
    copied = {
        json.loads(line)["key"]: json.loads(line)["correct"]
        for line in (hard / "samples.jsonl").read_text().splitlines()
    }
    assert copied == counts
    summary = json.loads((hard / "summary.json").read_text())
    assert summary["stages"]["kept"] == sum(1 for c in counts.values() if 0 < c <= 2)
    assert summary["stages"]["too_easy_dropped"] == sum(1 for c in counts.values() if c > 2)
    other_seed = tmp_path / "tiny-arith-pass0.3"
    assert main([*base, "--pass-rate", "0.3", "--seed", "1", "--out", str(other_seed)]) == 0
    assert sum(calls) == 200  # a different seed is a different sample: drawn again


def test_data_filter_accepts_a_released_prefiltered_set(tiny_env, tmp_path) -> None:
    from repro.tasks.tiny_arith import ensure_data

    rows = pd.read_parquet(ensure_data(0)["tiny-minerva"])
    released = tmp_path / "released.parquet"
    rows.to_parquet(released)
    out = tmp_path / "from-released"
    assert main(["data", "filter", "--input", str(released), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stages"]["prefiltered_input"] == 54 and not (out / "samples.jsonl").exists()
    assert summary["split"]["train"] + summary["split"]["val"] == 54


def test_data_filter_bad_input(tmp_path, capsys) -> None:
    assert main(["data", "filter", "--input", str(tmp_path / "missing.jsonl")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["data", "filter", "--pass-rate", "1.5"]) == 2
    assert "--pass-rate must be in (0, 1]" in capsys.readouterr().err
