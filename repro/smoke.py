"""`repro smoke`: the first GPU run in miniature, on the user's own node, before the grid spends GPU-days.

Each stage is what a grid cell does, in the order it does it, through the commands a user types:
  stack   the installed vLLM / torch / transformers / attention against the tested stack, CUDA, disk;
  config  the cell composed against verl, typed, validated, through vLLM's admission rules (the dry run);
  train   `repro run ... --engine verl --steps 2` of Seq-balance with a small batch (verl's real trainer,
          rollout server, weight sync, checkpoint save);
  weights the last checkpoint holds Hugging Face weights that vLLM / transformers load;
  eval    `repro eval` of that checkpoint on a few problems (tiny-arith's first tier: no network needed);
  collect `repro collect` and `repro table weighted-average` show the run's row with a number.
A stage that fails prints its reason and its fix and the stages that need it are skipped, so the one line
to act on is the first FAIL. On a CUDA machine the cell is Qwen2.5-Math-1.5B on every visible GPU; on a
CPU it is tiny-arith through `--engine verl` (what the test suite runs).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from repro.cell import resolve_cell

GPU_MODEL = "qwen2.5-math-1.5b"
CPU_MODEL = "tiny-arith"
METHOD = "seq-balance"
STEPS = 2
EVAL_BENCHMARK = "tiny-math500"  # built locally: a node without the Hub can still evaluate
EVAL_K = 2
GPU_BATCH = 16  # prompts per step: 16 x up to 32 responses, enough to exercise every round
CPU_BATCH = 8
GPU_RESPONSE_TOKENS = 512  # the smoke's shorter responses; the grid's 2048 are the dry run's business
SMOKE_TRAIN_PROMPTS = 64


@dataclass
class Stage:
    name: str
    ok: bool | None  # None: skipped
    detail: str
    seconds: float = 0.0

    def line(self) -> str:
        mark = {True: "PASS", False: "FAIL", None: "SKIP"}[self.ok]
        took = f" ({self.seconds:.0f} s)" if self.seconds >= 1 else ""
        return f"{mark} {self.name:<8} {self.detail}{took}"


class _Failed(Exception):
    """A stage's failure: its reason and fix, as one line."""


def _repro(args: list[str], log: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A `repro` command as the user would type it, its output kept in `log`."""
    cmd = [sys.executable, "-m", "repro.cli", *args]
    with open(log, "a") as handle:
        handle.write(f"$ repro {' '.join(args)}\n")
        handle.flush()
        return subprocess.run(cmd, stdout=handle, stderr=subprocess.STDOUT, env=env, check=False)


def _last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("error:") or "Error" in line]
    return (errors or lines or ["(no output)"])[-1][:300]


class Smoke:
    """The stages of one smoke run in `folder` (kept: logs, the run, its evaluation)."""

    def __init__(self, folder: Path, model: str | None = None, model_path: Path | None = None) -> None:
        import torch

        self.cuda = bool(torch.cuda.is_available())
        self.gpus = torch.cuda.device_count() if self.cuda else 0
        self.model = model or (GPU_MODEL if self.cuda else CPU_MODEL)
        self.cell = resolve_cell(self.model, METHOD, engine="verl")  # what the smoke's `repro run` resolves
        self.backbone = self.cell.backbone
        self.cpu = self.cell.is_cpu
        self.model_path = model_path
        self.folder = Path(folder)
        self.runs = self.folder / "runs"
        self.run = self.runs / f"{self.model}__{METHOD}__smoke__s0"
        self.log = self.folder / "smoke.log"
        self.env = dict(os.environ)
        if self.cpu:
            self.env.setdefault("REPRO_TORCH_THREADS", "1")

    # -- the cell, as `repro run` arguments ------------------------------------------------------------
    def run_args(self) -> list[str]:
        batch = CPU_BATCH if self.cpu else GPU_BATCH
        args = ["run", "--model", self.model, "--method", METHOD, "--engine", "verl", "--steps", str(STEPS),
                "--batch", str(batch), "--run-dir", str(self.run), "--set", "trainer.save_freq=1"]  # fmt: skip
        if not self.cpu:  # one node, the GPUs it has, short responses, the smoke's own prompts
            gpus = max(1, self.gpus)
            tp = int(self.cell.resources["rollout.tensor_model_parallel_size"].value)
            args += [
                "--set", f"trainer.n_gpus_per_node={gpus}", "--set", "trainer.nnodes=1",
                "--set", f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
                "--set", f"data.max_response_length={GPU_RESPONSE_TOKENS}",
                "--set", f"actor_rollout_ref.rollout.tensor_model_parallel_size={min(tp, gpus)}",
                "--train-file", str(self.folder / "data" / "train.parquet"),
                "--val-file", str(self.folder / "data" / "val.parquet"),
            ]  # fmt: skip
            if self.model_path is not None:
                args += ["--set", f"actor_rollout_ref.model.path={self.model_path}"]
        return args

    # -- stages ------------------------------------------------------------------------------------------
    def stack(self) -> str:
        if not self.cpu:  # a GPU cell: the node check every job runs, with its lines (repro.stack_check)
            return self._gpu_stack()
        from repro.gpu_stack import stack_problems

        problems = stack_problems(False)
        need = self._disk_needed()
        self.folder.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self.folder).free
        if free < need:
            problems.append(
                f"{free / 1e9:.1f} GB free under {self.folder}, the smoke's checkpoints need {need / 1e9:.1f} GB: "
                "pass --folder on a larger disk"
            )
        if problems:
            raise _Failed(" | ".join(problems))
        devices = f"{self.gpus} CUDA GPU(s)" if self.cuda else "no CUDA (the CPU rehearsal)"
        return f"{devices}; {_versions()}; {free / 1e9:.0f} GB free for checkpoints (need {need / 1e9:.2f} GB)"

    def _gpu_stack(self) -> str:
        """The same checks and lines as a GPU job's first line (`python -m repro.node_check`): packages,
        attention, the driver against torch's CUDA, CUDA itself, the smoke's disk; each line on its own row."""
        from repro.stack_check import CellNeeds, failures, run_checks

        self.folder.mkdir(parents=True, exist_ok=True)
        need = self._disk_needed()
        needs = CellNeeds(
            gpus_per_node=max(1, self.gpus), checkpoints=str(self.folder), one_save=need // STEPS, whole_run=need
        )
        checks = run_checks(needs, on_node=True)
        shown = "\n".join(f"         {check.line()}" for check in checks)
        bad = failures(checks)
        if bad:
            raise _Failed(f"{bad[0].detail}\n{shown}")
        return f"{self.gpus} CUDA GPU(s); {_versions()}\n{shown}"

    def _disk_needed(self) -> int:
        params = self.backbone.param_count or 0
        return params * 16 * STEPS  # fp32 weights + AdamW moments + the hf_model copy, every step kept

    def config(self) -> str:
        if not self.cpu:
            self._smoke_data()
        proc = _repro([*self.run_args(), "--dry-run"], self.folder / "dry-run.log", self.env)
        text = (self.folder / "dry-run.log").read_text(errors="replace")
        if proc.returncode != 0:
            raise _Failed(_last_error(self.folder / "dry-run.log"))
        context = next((line.strip("# ").strip() for line in text.splitlines() if "vLLM max_model_len" in line), "")
        return context or "composed, typed and validated"

    def train(self) -> str:
        if self.run.exists():  # a smoke starts from nothing: an older run would only resume
            shutil.rmtree(self.run)
        proc = _repro(self.run_args(), self.log, self.env)
        if proc.returncode != 0:
            raise _Failed(f"{_last_error(self.log)} (full log: {self.log})")
        from repro.rundir import RunDir

        steps = len(RunDir(self.run).logged_steps())  # collect's own reader of the attempt files
        if steps < STEPS:
            raise _Failed(f"verl logged {steps} of {STEPS} steps (log: {self.log})")
        return f"{steps} steps of {METHOD} through verl's trainer; metrics in {self.run / 'metrics'}"

    def weights(self) -> str:
        """The checkpoint `repro eval` will pick, through eval's own target check (weights and shards)."""
        from repro.errors import ReproError
        from repro.evaluation.runner import targets

        try:
            (target,) = targets(self.run, all_checkpoints=False)
        except ReproError as exc:
            raise _Failed(f"{exc} (keep hf_model in actor.checkpoint.save_contents)") from None
        model = Path(target.model_path)
        size = sum(f.stat().st_size for pattern in ("*.safetensors", "*.bin") for f in model.glob(pattern))
        kept = len(list(self.run.glob("checkpoints/global_step_*/actor")))
        return f"{kept} checkpoint(s) kept; {target.label} has {size / 1e6:.1f} MB of weights in {model}"

    def evaluate(self) -> str:
        args = ["eval", str(self.run), "--benchmarks", EVAL_BENCHMARK, "--k", str(EVAL_K), "--pass-k", "1,2"]
        if not self.cpu:
            args += ["--max-new-tokens", str(GPU_RESPONSE_TOKENS)]
        proc = _repro(args, self.log, self.env)
        if proc.returncode != 0:
            raise _Failed(f"{_last_error(self.log)} (full log: {self.log})")
        summaries = sorted(self.run.glob("eval/*/summary.json"))
        if not summaries:
            raise _Failed(f"repro eval wrote no summary.json under {self.run / 'eval'}")
        summary = json.loads(summaries[-1].read_text())
        row = summary["benchmarks"][EVAL_BENCHMARK]
        return f"{EVAL_BENCHMARK}: {row['problems']} problems x {EVAL_K}, Ave@{EVAL_K} {100 * row['ave_at_k']:.1f}%"

    def collect(self) -> str:
        results = self.folder / "results"
        proc = _repro(["collect", "--runs-root", str(self.runs), "--results", str(results)], self.log, self.env)
        if proc.returncode != 0:
            raise _Failed(f"{_last_error(self.log)} (full log: {self.log})")
        table = self.folder / "weighted-average.md"
        proc = _repro(
            ["table", "weighted-average", "--results", str(results), "--measured-only", "--out", str(table)],
            self.log,
            self.env,
        )
        if proc.returncode != 0 or not table.exists():
            raise _Failed(f"{_last_error(self.log)} (full log: {self.log})")
        rows = [line for line in table.read_text().splitlines() if METHOD in line.lower() or "seq-balance" in line]
        if not rows:
            raise _Failed(f"{table} has no {METHOD} row")
        return f"{results} and {table} hold the run's row"

    # -- the driver ----------------------------------------------------------------------------------------
    def stages(self) -> list[tuple[str, Callable[[], str]]]:
        return [("stack", self.stack), ("config", self.config), ("train", self.train), ("weights", self.weights),
                ("eval", self.evaluate), ("collect", self.collect)]  # fmt: skip

    def run_all(self, on_stage: Callable[[Stage], None] = lambda _s: None) -> list[Stage]:
        done: list[Stage] = []
        failed = False
        for name, step in self.stages():
            if failed:
                stage = Stage(name, None, "skipped: an earlier stage failed")
            else:
                start = time.perf_counter()
                try:
                    stage = Stage(name, True, step())
                except _Failed as exc:
                    stage, failed = Stage(name, False, str(exc)), True
                stage.seconds = time.perf_counter() - start
            done.append(stage)
            on_stage(stage)
        return done

    def _smoke_data(self) -> None:
        """A GPU smoke's training prompts: tiny-arith problems in the backbone's own prompt template, so a node
        without the Hub (or before `repro data filter`) can train; they are easy, which is all 2 steps need."""
        from repro.data.filter import Candidate, write_rows
        from repro.tasks.tiny_arith import build

        out = self.folder / "data"
        if (out / "train.parquet").exists() and (out / "val.parquet").exists():
            return
        problems = build(0).train[: SMOKE_TRAIN_PROMPTS + 8]
        rows = [Candidate(f"smoke-{i}", p.question, p.answer, data_source="tiny-arith") for i, p in enumerate(problems)]
        template = self.cell.template
        write_rows(rows[:SMOKE_TRAIN_PROMPTS], out / "train.parquet", "train", template)
        write_rows(rows[SMOKE_TRAIN_PROMPTS:], out / "val.parquet", "test", template)


def _versions() -> str:
    from repro.gpu_stack import installed_version, vllm_line

    names = ("torch", "transformers", "verl", "flash-attn")
    return ", ".join([*(f"{n} {installed_version(n) or '-'}" for n in names), vllm_line()])
