"""One arithmetic for the CPU miniature (repro.arithmetic, issue 35): whatever kernel variables a process
starts with, `repro` computes the same bits; the user's own environment comes back for GPU cells; the opt-out
says once that its results are not comparable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from repro import arithmetic

ROOT = Path(__file__).resolve().parents[1]
PROBE = ROOT / "tests" / "arithmetic_probe.py"
FINGERPRINT = ROOT / "benchmarks" / "arithmetic_fingerprint.py"
EMULATED_CPU = "EPYC-v3"  # qemu's AMD EPYC (Zen): CPUID says AuthenticAMD, AVX2 and FMA
TORCH_SQRT = {"sqrt", "adamw x3"}  # torch's float32 sqrt and torch.optim.AdamW, which takes its root with it


def _clean_env() -> dict[str, str]:
    """This process's environment without the pin: what a user's shell holds before `repro` starts."""
    env = dict(os.environ)
    for name in (*arithmetic.pinned_env(), arithmetic.SAVED_ENV, arithmetic.WARNED_ENV, arithmetic.opt_out_env()):
        env.pop(name, None)
    return env


def _probe(home: Path, **variables: str) -> dict:
    proc = subprocess.run(
        [sys.executable, str(PROBE), str(home)],
        env={**_clean_env(), **variables},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PROBE "))
    return {"stderr": proc.stderr, **json.loads(line.removeprefix("PROBE "))}


@pytest.mark.heavy
def test_the_model_build_a_cell_and_its_evaluation_are_bit_identical_whatever_kernels_the_process_started_with(
    tmp_path,
) -> None:
    """Two starting environments that each compute other bits without the pin (measured: a transformer's
    AdamW steps hash differently under each ATen capability, MKL branch and thread count), then the same
    with the pin lifted: the control that shows the hashes can differ at all."""
    starts = {
        "avx512": {"ATEN_CPU_CAPABILITY": "avx512"},
        "default+2 threads+MKL auto": {"ATEN_CPU_CAPABILITY": "default", "OMP_NUM_THREADS": "2", "MKL_CBWR": "AUTO"},
    }
    seen = {name: _probe(tmp_path / f"home{i}", **env) for i, (name, env) in enumerate(starts.items())}
    products = ("model", "checkpoint", "metrics", "eval")
    first = seen["avx512"]
    for name, got in seen.items():
        assert (got["capability"], got["threads"]) == ("AVX2", 1), name
        assert {p: got[p] for p in products} == {p: first[p] for p in products}, name
    run = tmp_path / "home0" / "runs" / "tiny-arith__seq-balance__standard__s0"
    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["arithmetic"]["pinned"] and config["arithmetic"]["ATEN_CPU_CAPABILITY"] == "avx2"
    attempt = json.loads((run / "status.json").read_text())["attempts"][0]
    assert attempt["arithmetic"]["torch_capability"] == "AVX2" and attempt["arithmetic"]["cpu"]
    # the control: the pin lifted on this CPU's AVX512 kernels, two threads
    native = _probe(tmp_path / "native", ATEN_CPU_CAPABILITY="avx512", **{arithmetic.opt_out_env(): "1"})
    assert native["capability"] == "AVX512" and native["model"] != first["model"]
    assert native["checkpoint"] != first["checkpoint"] and native["metrics"] != first["metrics"]
    assert native["stderr"].count("will not be comparable") == 1  # one line, though the probe runs repro twice


@pytest.mark.heavy
def test_an_emulated_amd_epyc_computes_every_kernel_the_project_uses_bit_for_bit(tmp_path) -> None:
    """The CPU-vendor half of the arithmetic, which no variable pins: qemu-x86_64 answers CPUID as an AMD
    EPYC (MKL and oneDNN take their non-Intel branches, sized by its caches) and computes the approximate
    instructions (RSQRTPS, RCPPS) its own way, as every vendor does. Every primitive of the fingerprint must
    give this CPU's bits there, except torch's float32 sqrt and the AdamW built on it, which the project
    replaces (repro.local.adamw): that pair differing is the control that shows the emulation computes
    other bits where the hardware chooses. (TCG emulates no AVX512; the pin keeps every kernel below it.)"""
    qemu = shutil.which("qemu-x86_64")
    assert qemu, "qemu-x86_64 is missing: run `bash scripts/setup-debian.sh` (Debian's qemu-user)"

    def hashes(prefix: list[str], out: Path) -> dict[str, str]:
        subprocess.run(
            [*prefix, sys.executable, str(FINGERPRINT), "--out", str(out)],
            env=_clean_env(),
            check=True,
            capture_output=True,
            timeout=600,
            cwd=ROOT,
        )
        return json.loads(out.read_text())["hashes"]

    here = hashes([], tmp_path / "here.json")
    epyc = hashes([qemu, "-cpu", EMULATED_CPU], tmp_path / "epyc.json")
    assert here.keys() == epyc.keys() and len(here) == 32
    assert {name for name in here if here[name] != epyc[name]} == TORCH_SQRT


def _pinned_environ(**variables: str) -> dict[str, str]:
    code = "from repro import arithmetic; import json, os; arithmetic.pin(); print(json.dumps(dict(os.environ)))"
    proc = subprocess.run(
        [sys.executable, "-c", code], env={**_clean_env(), **variables}, capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def test_pin_overrides_the_users_values_and_a_gpu_cell_gets_them_back() -> None:
    env = _pinned_environ(OMP_NUM_THREADS="8", ATEN_CPU_CAPABILITY="avx512")
    for name, value in arithmetic.pinned_env().items():
        assert env[name] == value, name
    back = arithmetic.released(env)
    assert back["OMP_NUM_THREADS"] == "8" and back["ATEN_CPU_CAPABILITY"] == "avx512"
    assert "MKL_CBWR" not in back and arithmetic.SAVED_ENV not in back  # unset before, unset again
    # a child of a pinned process keeps the first process's saved values, not the pinned ones
    again = _pinned_environ(**{k: v for k, v in env.items() if k in (*arithmetic.pinned_env(), arithmetic.SAVED_ENV)})
    assert arithmetic.released(again)["OMP_NUM_THREADS"] == "8"


def test_the_attempt_wrapper_gives_verl_the_users_environment(monkeypatch) -> None:
    from repro.launch import attempt

    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(arithmetic.SAVED_ENV, json.dumps({"OMP_NUM_THREADS": "16"}))
    assert attempt._trainer_env(["python", "-m", "x", "trainer.device=cpu"])["OMP_NUM_THREADS"] == "16"
    assert attempt._trainer_env(["python", "-m", "x", "trainer.n_gpus_per_node=8"])["OMP_NUM_THREADS"] == "16"


def test_the_opt_out_changes_nothing_and_the_thread_count_follows_it(monkeypatch) -> None:
    env = _pinned_environ(**{arithmetic.opt_out_env(): "1", "OMP_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == "3" and "MKL_CBWR" not in env
    assert arithmetic.threads(4) == 1  # this suite runs pinned (conftest)
    monkeypatch.setenv(arithmetic.opt_out_env(), "1")
    assert arithmetic.threads(4) == 4 and arithmetic.fingerprint()["pinned"] is False
    assert "not pinned" in arithmetic.describe()
