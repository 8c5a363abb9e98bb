"""The suite's one `repro sweep run` through verl's real trainer: sweeps/tiny-verl-pipeline.yaml (grpo-n4 and
seq-balance on tiny-arith).

`tests/test_verl_pipeline.py` takes it on through evaluation, collect, tables and plots (the GPU user's
path); `tests/test_verl_engine.py` reads its seq-balance run for the trainer's own checks, so the suite
trains those cells once. The overrides are the ones test_verl_engine's other runs use: the plugin's audit
files, no lr warm-up (verl's warm-up makes step 1's lr 0), and a policy that moves every step (STRONG).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from verl_slots import verl_slots

BATCH = 8
STEPS = 3  # with the CPU cells' save_freq 1 and 2 checkpoints kept: global_step_2 and global_step_3
METHODS = ("grpo-n4", "seq-balance")
AUDIT = "+ray_kwargs.ray_init.runtime_env.env_vars.REPRO_AUDIT_UPDATES=1"
NO_WARMUP = "actor_rollout_ref.actor.optim.lr_warmup_steps=0"
# A policy that moves every step (a large step on the entropy bonus): test_verl_engine's weight-sync control
# compares the sweep's grpo-n4 cell (synced) with one run whose updates never reach the rollout server.
STRONG = ("actor_rollout_ref.actor.optim.lr=0.01", "actor_rollout_ref.actor.entropy_coeff=0.1")
# the sweep's evaluation stage, made small: Ave@2 on two tiers, every kept checkpoint (the shipped file asks
# for the paper's Ave@32 on all four)
EVAL = {"benchmarks": "tiny-math500,tiny-aime", "k": 2, "checkpoints": "all"}


@dataclass(frozen=True)
class SweepRun:
    root: Path  # the runs root: one folder per cell, plus the launcher's .launch/
    file: Path
    stdout: str
    stderr: str
    seconds: float

    def run(self, method: str) -> Path:
        return self.root / f"tiny-arith__{method}__standard__s0"


SHIPPED = Path(__file__).resolve().parents[1] / "sweeps" / "tiny-verl-pipeline.yaml"  # the README's sweep


def sweep_file(path: Path) -> Path:
    """The README's sweep file with the audit overrides added (`overrides:` applies them to every cell) and
    its evaluation stage shrunk."""
    spec = yaml.safe_load(SHIPPED.read_text())
    assert (spec["backbones"], spec["methods"], spec["engine"]) == (["tiny-arith"], list(METHODS), "verl"), spec
    assert not spec.get("overrides"), spec
    assert spec["eval"]["k"] == 32 and spec["eval"]["checkpoints"] == "all", spec  # the paper's protocol
    spec["overrides"] = dict(item.split("=", 1) for item in (AUDIT, NO_WARMUP, *STRONG))
    spec["eval"] = {**spec["eval"], **EVAL}
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def run_sweep(home: Path, folder: Path) -> SweepRun:
    file = sweep_file(folder / "verl-pipeline.yaml")
    root = folder / "runs"
    argv = [sys.executable, "-m", "repro.cli", "sweep", "run", str(file), "--steps", str(STEPS)]
    argv += ["--batch", str(BATCH), "--max-parallel", "1", "--runs-root", str(root)]
    env = {**os.environ, "REPRO_HOME": str(home), "RAY_DEDUP_LOGS": "0"}
    with verl_slots():  # the cells run one at a time (--max-parallel 1)
        start = time.monotonic()
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=1500)
        seconds = time.monotonic() - start
    logs = "".join(
        f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((root / ".launch").glob("*.err")) if p.is_file()
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:] + logs
    return SweepRun(root, file, proc.stdout, proc.stderr, seconds)
