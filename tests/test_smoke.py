"""`repro smoke`: every stage on this CPU (tiny-arith through verl's real trainer), a failing stage, and the GPU
cell's arguments composed and admitted without a GPU."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
from verl_slots import verl_slots

from repro.cli import main


@pytest.mark.heavy
def test_smoke_runs_every_stage_on_the_cpu(tiny_env, tmp_path, capsys) -> None:
    folder = tmp_path / "smoke"
    with verl_slots():  # its train stage is a verl run (tests/verl_slots.py)
        code = main(["smoke", "--folder", str(folder)])
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if re.match(r"(PASS|FAIL|SKIP) ", line)]
    assert code == 0, out
    assert [line.split()[:2] for line in lines] == [
        ["PASS", name] for name in ("stack", "config", "train", "weights", "eval", "collect")
    ]
    assert "smoke: 6 of 6 stages passed" in out
    assert "vLLM max_model_len: 64" in out  # tiny-arith: prompt 48 + response 16, its 64 positions
    run = folder / "runs" / "tiny-arith__seq-balance__smoke__s0"
    steps = [json.loads(x)["step"] for x in (run / "metrics" / "attempt-001.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    assert (run / "checkpoints" / "global_step_2" / "actor" / "huggingface" / "model.safetensors").stat().st_size > 3e5
    summary = json.loads((run / "eval" / "global_step_2" / "summary.json").read_text())
    row = summary["benchmarks"]["tiny-math500"]
    assert summary["k"] == 2 and row["problems"] == 100 and 0.0 <= row["ave_at_k"] <= 1.0
    ave = float(re.search(r"Ave@2 ([0-9.]+)%", out).group(1))
    assert abs(ave - 100 * row["ave_at_k"]) < 0.051
    table = (folder / "weighted-average.md").read_text()
    assert re.search(r"\| tiny-arith \| standard \| seq-balance \| 1 \| [0-9.]+ \|", table), table


def test_a_failing_stage_names_its_fix_and_skips_the_rest(tmp_path, monkeypatch, capsys) -> None:
    import repro.gpu_stack

    monkeypatch.setattr(repro.gpu_stack, "stack_problems", lambda cuda, attn="flash_attention_2": [
        "vllm 0.31.0 is installed, the project tested 0.24.0 (verl 0.9.1's pin): run `bash scripts/setup-venv.sh gpu`"
    ])  # fmt: skip
    code = main(["smoke", "--folder", str(tmp_path / "s")])
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL stack    vllm 0.31.0 is installed, the project tested 0.24.0" in out
    assert out.count("SKIP ") == 5 and "fix stack first" in out
    assert not (tmp_path / "s" / "runs").exists()  # nothing trained after a failed stage


def test_the_gpu_smoke_cell_composes_and_passes_admission_here(tmp_path, tiny_env, capsys) -> None:
    from repro.smoke import GPU_RESPONSE_TOKENS, Smoke

    smoke = Smoke(tmp_path / "gpu", model="qwen2.5-math-1.5b")
    args = smoke.run_args()
    assert args[:6] == ["run", "--model", "qwen2.5-math-1.5b", "--method", "seq-balance", "--engine"]
    assert "trainer.n_gpus_per_node=1" in args and f"data.max_response_length={GPU_RESPONSE_TOKENS}" in args
    line = smoke.config()  # the dry run of exactly that cell, through verl's composition and the rules
    assert line.startswith(f"vLLM max_model_len: {1024 + GPU_RESPONSE_TOKENS} (set explicitly)")
    train = pd.read_parquet(tmp_path / "gpu" / "data" / "train.parquet")
    assert len(train) == 64 and train["prompt"][0][0]["role"] == "system"  # the released chat template
    with pytest.raises(Exception, match=r"^torch 2\.13\.0\+cpu is installed") as failed:
        smoke.stack()  # the node check's lines, the first failure first: the CPU build, not a vague "no GPU"
    lines = str(failed.value).splitlines()[1:]
    assert [line.split()[:2] for line in lines] == [
        ["FAIL", "stack"], ["FAIL", "stack"], ["FAIL", "stack"], ["WARN", "attention"], ["SKIP", "driver"],
        ["FAIL", "cuda"], [lines[-1].split()[0], "disk"],
    ]  # fmt: skip
