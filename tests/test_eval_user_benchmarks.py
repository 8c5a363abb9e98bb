"""`repro eval` of a user's own benchmark (a name outside the catalog, sized by its file, graded by the default
mode) and of a model folder, whose records go under the runs root and never into the folder it reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_errors import one_error

from repro.cli import main
from repro.cpu_lm.model import TinyModelSpec, model_folder
from repro.evaluation.runner import MODEL_EVALS, model_eval_dir


class _Boxed:
    """Answers problem i with \\boxed{i} when i is even, and wrongly otherwise."""

    def generate(self, problems, n, seed):
        answers = [int(p.split()[-1].rstrip("?")) for p in problems]
        return [[f"So \\boxed{{{a if a % 2 == 0 else a + 1}}}"] * n for a in answers]


def _write(path: Path, count: int) -> Path:
    path.write_text("".join(json.dumps({"problem": f"What is {i}?", "answer": str(i)}) + "\n" for i in range(count)))
    return path


@pytest.fixture
def model(tiny_env, monkeypatch) -> Path:
    monkeypatch.setattr("repro.evaluation.backends.make_generator", lambda *_a, **_k: _Boxed())
    return model_folder(TinyModelSpec(), Path(tiny_env["REPRO_HOME"]))


def test_an_own_benchmark_is_sized_by_its_file_and_written_under_the_runs_root(model, tmp_path) -> None:
    easy = _write(tmp_path / "easy.jsonl", 10)
    runs = tmp_path / "runs"
    before = sorted(p.name for p in model.iterdir())
    argv = ["eval", str(model), "--benchmarks", "easy", "--benchmark-file", f"easy={easy}", "--k", "2"]
    assert main([*argv, "--pass-k", "1", "--runs-root", str(runs)]) == 0
    assert sorted(p.name for p in model.iterdir()) == before  # the model folder is only read
    out = model_eval_dir(model, runs)
    assert out.parent == runs / MODEL_EVALS and out.name.startswith(model.name + "-")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["weights"] == {"easy": 10} and summary["grading_modes"] == {"easy": "boxed"}
    assert summary["benchmarks"]["easy"]["ave_at_k"] == pytest.approx(0.5)  # 5 of 10 answered right, k=2 each
    assert summary["sources"]["easy"] == {"origin": "file", "path": str(easy)}
    records = [json.loads(line) for line in (out / "easy.jsonl").read_text().splitlines()]
    assert len(records) == 20 and sum(r["score"] for r in records) == 10


def test_two_model_folders_of_one_name_get_two_record_folders(tmp_path) -> None:
    (tmp_path / "a" / "m").mkdir(parents=True)
    (tmp_path / "b" / "m").mkdir(parents=True)
    runs = tmp_path / "runs"
    assert model_eval_dir(tmp_path / "a" / "m", runs) != model_eval_dir(tmp_path / "b" / "m", runs)
    assert model_eval_dir(tmp_path / "a" / "m", runs) == model_eval_dir(tmp_path / "a" / ".." / "a" / "m", runs)


@pytest.mark.parametrize(
    ("extra", "fragment"),
    [
        (["--benchmarks", "easy"], "unknown benchmark 'easy'"),
        (
            ["--benchmarks", "math500", "--benchmark-file", "math500={easy}"],
            "give it your own name: --benchmarks my-math500",
        ),
        (["--benchmarks", "easy", "--benchmark-file", "easy={empty}"], "easy: the benchmark file has no problems"),
    ],
)
def test_bad_own_benchmarks_are_one_line(model, tmp_path, capsys, extra, fragment) -> None:
    paths = {"easy": _write(tmp_path / "easy.jsonl", 3), "empty": _write(tmp_path / "empty.jsonl", 0)}
    extra = [item.format(**paths) for item in extra]
    line = one_error(main(["eval", str(model), "--runs-root", str(tmp_path / "runs"), *extra]), capsys.readouterr().err)
    assert fragment in line
    assert not (tmp_path / "runs").exists()  # nothing written before the problem was found
