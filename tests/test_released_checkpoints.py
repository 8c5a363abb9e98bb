"""The authors' released checkpoints: catalog data, `repro models`, and `repro eval NAME` end to end into a
model run folder that `repro collect` and `repro table weighted-average` show beside the paper's rows.

There is no Hub here, so "the released checkpoint" is the tiny model passed with --model-path, evaluated
on full-size benchmark files of tiny-arith-like problems: the numbers are the tiny model's, the wiring
(names, folders, markers, rows, paper columns) is what is under test.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from repro import catalog
from repro.catalog import CatalogError
from repro.catalog.grid_readers import _parse_checkpoints
from repro.cli import main
from repro.errors import ReproError
from repro.evaluation.runner import MODEL_EVAL_MARKER, read_records, targets

RELEASED = {
    "qwen2.5-math-1.5b-balance-easy": (
        "RLHFlow/Qwen2.5-Math-1-5B-Reinforce-Ada-balance-easy",
        "qwen2.5-math-1.5b",
        "standard",
    ),
    "qwen2.5-math-1.5b-balance-hard": (
        "RLHFlow/Qwen2.5-Math-1-5B-Reinforce-Ada-balance-hard",
        "qwen2.5-math-1.5b",
        "hard",
    ),
    "qwen2.5-math-7b-balance-easy": (
        "RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-easy",
        "qwen2.5-math-7b",
        "standard",
    ),
    "qwen2.5-math-7b-balance-hard": ("RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-hard", "qwen2.5-math-7b", "hard"),
    "qwen3-4b-instruct-balance-hard": (
        "RLHFlow/Qwen3-4B-Instruct-2507-Reinforce-Ada-balance-hard",
        "qwen3-4b-instruct",
        "hard",
    ),
    "llama-3.2-3b-instruct-balance-hard": (
        "RLHFlow/Llama-3.2-3B-Instruct-Reinforce-Ada-balance-hard",
        "llama-3.2-3b-instruct",
        "hard",
    ),
}
SIZES = {"math500": 500, "minerva_math": 272, "olympiadbench": 675, "aime_like": 230}
PAPER_EASY_1_5B = {"math500": 77.4, "minerva_math": 36.5, "olympiadbench": 40.5, "aime_like": 17.5, "weighted": 47.6}


@pytest.fixture
def wide(monkeypatch) -> None:
    """Rich output without colour and wide enough that Hub ids are never folded."""
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("COLUMNS", "250")


# ---------------------------------------------------------------------------------------------- catalog


def test_the_six_released_checkpoints_with_their_table1_rows() -> None:
    found = catalog.checkpoints()
    assert list(found) == list(RELEASED)
    table1 = pd.read_csv(Path(__file__).resolve().parents[1] / "paper_tables" / "table1_per_benchmark.csv")
    for key, (hf_id, backbone, prompt_set) in RELEASED.items():
        checkpoint = found[key]
        assert (checkpoint.hf_id, checkpoint.backbone, checkpoint.method, checkpoint.prompt_set) == (
            hf_id,
            backbone,
            "seq-balance",
            prompt_set,
        )
        assert checkpoint.table1_row == {"backbone": backbone, "prompt_set": prompt_set, "method": "seq-balance"}
        hit = table1[
            (table1["backbone"] == backbone)
            & (table1["prompt_set"] == prompt_set)
            & (table1["method"] == "seq-balance")
        ]
        assert len(hit) == 1
        assert all(setting.source for setting in checkpoint.settings.values())
        assert catalog.get_checkpoint(hf_id) is checkpoint  # by Hub id too


def _entry(**changes) -> dict:
    entry = {
        "description": "d",
        "hf_id": {"value": "RLHFlow/x", "source": "s"},
        "backbone": {"value": "qwen2.5-math-7b", "source": "s"},
        "method": {"value": "seq-balance", "source": "s"},
        "prompt_set": {"value": "hard", "source": "s"},
        "table1_row": {
            "value": {"backbone": "qwen2.5-math-7b", "prompt_set": "hard", "method": "seq-balance"},
            "source": "s",
        },
    }
    return entry | {k: {"value": v, "source": "s"} for k, v in changes.items()}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"backbone": "gpt-5"}, r"checkpoints\.yaml: c\.backbone: unknown backbone 'gpt-5'"),
        ({"method": "ppo"}, r"checkpoints\.yaml: c\.method: unknown method 'ppo'"),
        ({"prompt_set": "medium"}, r"checkpoints\.yaml: c\.prompt_set: unknown prompt set 'medium'"),
        ({"hf_id": "no-owner"}, r"c\.hf_id: must be a Hub id owner/name"),
        (
            {"table1_row": {"backbone": "qwen2.5-math-7b", "prompt_set": "hard", "method": "dapo"}},
            r"c\.table1_row: qwen2.5-math-7b/hard/dapo is not a row of paper_tables/table1_per_benchmark\.csv",
        ),
        (
            {"table1_row": {"backbone": "qwen2.5-math-7b"}},
            r"c\.table1_row: must map exactly backbone, prompt_set, method",
        ),
    ],
)
def test_checkpoint_entries_are_validated(changes, message) -> None:
    rows = {("qwen2.5-math-7b", "hard", "seq-balance")}
    args = ({"qwen2.5-math-7b"}, {"seq-balance", "dapo"}, {"standard", "hard"}, rows)
    assert _parse_checkpoints({"c": _entry()}, "checkpoints.yaml", *args)["c"].hf_id == "RLHFlow/x"
    with pytest.raises(CatalogError, match=message):
        _parse_checkpoints({"c": _entry(**changes)}, "checkpoints.yaml", *args)
    missing = _entry()
    del missing["table1_row"]
    with pytest.raises(CatalogError, match=r"c: missing settings \['table1_row'\]"):
        _parse_checkpoints({"c": missing}, "checkpoints.yaml", *args)


# -------------------------------------------------------------------------------------------- repro models


def test_models_lists_the_released_checkpoints(capsys, wide) -> None:
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "Backbones" in out and "Released checkpoints" in out
    lines = out.splitlines()
    for key, (hf_id, backbone, prompt_set) in RELEASED.items():
        line = next(x for x in lines if f" {key} " in x)
        assert hf_id in line and f"{backbone}/{prompt_set}/seq-balance" in line


def test_models_shows_one_checkpoint_with_sources(capsys, wide) -> None:
    assert main(["models", "RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-hard"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("qwen2.5-math-7b-balance-hard (released checkpoint)\n")
    assert "backbone: qwen2.5-math-7b, prompt_set: hard, method: seq-balance" in out  # table1_row
    assert "PROTOCOL.md 'Training data' (released trained checkpoints)" in out
    assert "repro eval qwen2.5-math-7b-balance-hard" in out


@pytest.mark.parametrize(
    ("argv", "start"),
    [
        (["models", "qwen-9b"], "error: unknown backbone 'qwen-9b'; valid backbones: generic, llama-3.2-3b-instruct"),
        (["eval", "qwen-9b"], "error: unknown model 'qwen-9b': not a folder, a released checkpoint or a backbone"),
    ],
)
def test_an_unknown_name_is_one_line_and_exit_2(argv, start, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(start) and err.count("\n") == 1
    assert "qwen2.5-math-1.5b-balance-easy" in err  # the released checkpoints are named too


# ---------------------------------------------------------------------------------------------- targets


def test_names_resolve_to_hub_ids_and_model_run_folders(tmp_path) -> None:
    (released,) = targets("RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-hard", False, runs_root=tmp_path)
    assert released.model_path == "RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-hard"
    assert released.out_dir == tmp_path / "qwen2.5-math-7b-balance-hard" / "eval"
    assert (released.label, released.backbone, released.tiny) == (
        "qwen2.5-math-7b-balance-hard",
        "qwen2.5-math-7b",
        False,
    )
    assert released.marker == {
        "kind": "released-checkpoint",
        "key": "qwen2.5-math-7b-balance-hard",
        "hf_id": "RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-hard",
        "backbone": "qwen2.5-math-7b",
        "method": "seq-balance",
        "prompt_set": "hard",
        "table1_row": {"backbone": "qwen2.5-math-7b", "prompt_set": "hard", "method": "seq-balance"},
        "weights": "RLHFlow/Qwen2.5-Math-7B-Reinforce-Ada-balance-hard",
    }
    (base,) = targets("Qwen/Qwen2.5-Math-1.5B", False, runs_root=tmp_path)
    assert (base.model_path, base.out_dir) == ("Qwen/Qwen2.5-Math-1.5B", tmp_path / "qwen2.5-math-1.5b" / "eval")
    assert base.marker["kind"] == "base-model" and base.marker["prompt_set"] is None
    (elsewhere,) = targets("qwen2.5-math-1.5b", False, out=tmp_path / "x", runs_root=tmp_path)
    assert elsewhere.out_dir == tmp_path / "x" and elsewhere.marker is None  # --out: not a model run folder
    model = tmp_path / "local-model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    with pytest.raises(ReproError, match=r"--model-path gives the weights of a model named from the catalog; .* drop"):
        targets(model, False, runs_root=tmp_path, model_path=model)


# ------------------------------------------------------------------------------------------ end to end


def _benchmark_files(folder: Path) -> list[str]:
    """Full-size files of tiny-arith-like problems (the loader checks 500/272/675/230)."""
    folder.mkdir(parents=True, exist_ok=True)
    args = []
    for name, size in SIZES.items():
        path = folder / f"{name}.jsonl"
        rows = [{"problem": f"{i % 40} + {i % 7} =", "answer": i % 40 + i % 7} for i in range(size)]
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        args += ["--benchmark-file", f"{name}={path}"]
    return args


def _csv_table(results: Path, capsys, *extra: str) -> pd.DataFrame:
    capsys.readouterr()
    assert main(["table", "weighted-average", "--results", str(results), "--format", "csv", *extra]) == 0
    out = capsys.readouterr().out
    return pd.read_csv(io.StringIO(out), na_values=["—"])


def test_eval_a_released_checkpoint_by_name_then_collect_and_table(tiny_env, tmp_path, capsys) -> None:
    from repro.cpu_lm.model import ensure_tiny_model

    weights = ensure_tiny_model()  # the suite's tiny model stands in for the Hub download
    runs = tmp_path / "runs"
    argv = ["eval", "qwen2.5-math-1.5b-balance-easy", "--model-path", str(weights), "--runs-root", str(runs)]
    argv += ["--benchmarks", "math500", "--k", "1", "--pass-k", "1", "--max-new-tokens", "8"]
    assert main([*argv, *_benchmark_files(tmp_path / "bench")]) == 0
    folder = runs / "qwen2.5-math-1.5b-balance-easy"
    marker = json.loads((folder / MODEL_EVAL_MARKER).read_text())
    assert marker["kind"] == "released-checkpoint" and marker["weights"] == str(weights)
    assert (marker["backbone"], marker["method"], marker["prompt_set"]) == (
        "qwen2.5-math-1.5b",
        "seq-balance",
        "standard",
    )
    summary = json.loads((folder / "eval" / "summary.json").read_text())
    assert summary["model"] == str(weights)
    # the backbone's template (system prompt + instruction suffix), not the tiny model's own
    assert summary["generation"] == {"backend": "transformers", "max_new_tokens": 8, "prompt_template": "released"}
    assert summary["sources"] == {"math500": {"origin": "file", "path": str(tmp_path / "bench" / "math500.jsonl")}}
    records, bad = read_records(folder / "eval" / "math500.jsonl")
    assert bad == 0 and len(records) == 500
    assert summary["benchmarks"]["math500"]["ave_at_k"] == pytest.approx(sum(r["score"] for r in records) / 500)

    results = tmp_path / "results"
    assert main(["collect", "--runs-root", str(runs), "--results", str(results)]) == 0
    eval_rows = pd.read_parquet(results / "eval.parquet")
    assert list(eval_rows.columns[-2:]) == ["origin", "model"]
    assert eval_rows["benchmark"].tolist() == ["math500", "weighted_average"]
    assert set(eval_rows["origin"]) == {"released-checkpoint"}
    assert set(eval_rows["model"]) == {"qwen2.5-math-1.5b-balance-easy"}
    assert set(eval_rows["method"]) == {"seq-balance (released checkpoint)"}
    assert set(eval_rows["checkpoint_step"]) == {0}
    assert pd.read_parquet(results / "runs.parquet")["state"].tolist() == ["released-checkpoint"]

    table = _csv_table(results, capsys, "--measured-only")
    assert table["method"].tolist() == ["seq-balance (released checkpoint)"]
    row = table.iloc[0]
    assert (row["backbone"], row["prompt_set"], row["n_seeds"]) == ("qwen2.5-math-1.5b", "standard", 1)
    for name in SIZES:  # the paper numbers of the Table 1 row it should reproduce
        assert row[f"{name} paper"] == PAPER_EASY_1_5B[name]
    assert row["weighted paper"] == 47.6
    assert row["math500 measured"] == round(100 * summary["benchmarks"]["math500"]["ave_at_k"], 1)
    assert row["weighted measured"] == round(100 * summary["weighted_average"], 1)
    assert pd.isna(row["delta paper"])  # one of four benchmarks measured: no like-for-like delta

    full = _csv_table(results, capsys, "--prompt-set", "standard")
    q15 = full[full["backbone"] == "qwen2.5-math-1.5b"]["method"].tolist()
    assert q15[q15.index("seq-balance") + 1] == "seq-balance (released checkpoint)"  # beside the paper's row
    paper_row = full[(full["backbone"] == "qwen2.5-math-1.5b") & (full["method"] == "seq-balance")].iloc[0]
    assert pd.isna(paper_row["n_seeds"]) and paper_row["weighted paper"] == 47.6  # the paper's own row stays


def test_a_base_model_by_name_sits_first_beside_trained_runs(tiny_env, tiny_runs, tmp_path, capsys) -> None:
    runs = tmp_path / "runs"
    shutil.copytree(tiny_runs, runs, ignore=shutil.ignore_patterns("checkpoints"))
    argv = ["eval", "tiny-arith", "--runs-root", str(runs), "--benchmarks", "tiny-minerva,tiny-aime", "--k", "4"]
    assert main([*argv, "--pass-k", "1,2,4"]) == 0
    marker = json.loads((runs / "tiny-arith" / MODEL_EVAL_MARKER).read_text())
    assert marker["kind"] == "base-model" and marker["hf_id"] is None
    summary = json.loads((runs / "tiny-arith" / "eval" / "summary.json").read_text())
    assert summary["generation"]["prompt_template"] == "tiny"

    results = tmp_path / "results"
    assert main(["collect", "--runs-root", str(runs), "--results", str(results)]) == 0
    eval_rows = pd.read_parquet(results / "eval.parquet")
    origins = eval_rows.drop_duplicates("run").set_index("run")["origin"].to_dict()
    assert origins == {
        "tiny-arith": "base-model",
        "tiny-arith__est__standard__s0": "run",
        "tiny-arith__grpo-n4__standard__s0": "run",
        "tiny-arith__seq-balance__standard__s0": "run",
    }
    table = _csv_table(results, capsys, "--measured-only")
    assert table["method"].tolist() == ["base model", "grpo-n4", "seq-balance", "est"]
    base = table.iloc[0]
    assert (base["backbone"], base["prompt_set"]) == ("tiny-arith", "none")
    assert base["weighted measured"] == round(100 * summary["weighted_average"], 1)
    assert pd.isna(base["weighted paper"]) and pd.isna(base["delta grpo-n4"])  # no paper row, no GRPO of its set


def test_a_folder_of_another_models_records_is_refused(tiny_env, tmp_path, capsys) -> None:
    from repro.cpu_lm.model import ensure_tiny_model

    runs = tmp_path / "runs"
    folder = runs / "qwen2.5-math-7b"
    folder.mkdir(parents=True)
    (folder / MODEL_EVAL_MARKER).write_text(json.dumps({"key": "qwen2.5-math-7b", "weights": "/elsewhere/Qwen"}))
    argv = ["eval", "qwen2.5-math-7b", "--model-path", str(ensure_tiny_model()), "--runs-root", str(runs)]
    files = _benchmark_files(tmp_path / "bench")[:2]  # math500's file: nothing from the Hub
    assert main([*argv, "--benchmarks", "math500", *files]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {folder} holds the evaluation of 'qwen2.5-math-7b' from '/elsewhere/Qwen'")
    assert err.count("\n") == 1 and not (folder / "eval").exists()
