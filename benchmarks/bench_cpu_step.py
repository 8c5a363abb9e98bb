"""Where a CPU training step's seconds go, and how close each stage runs to the matmul rate, per method.

Each method's cell trains the cached tiny-arith model for a few steps (`CpuTrainer.train_step`, no
checkpoints), once per path, each in a fresh process (none inherits another's warm caches: the grader's parsed
answers, sympy's), from the same weights and seed:
- transformers: transformers' own forward (REPRO_TRANSFORMERS_FORWARD=1), torch's products (MKL);
- compact-torch: the compact forward (`repro.cpu_lm.qwen2_forward`) with torch's F.linear for its products, which
  must compute transformers' bits (the benchmark checks the two runs end with identical weights);
- compact: the compact forward with OpenBLAS's products (`repro.cpu_lm.blas`), the trainer's path since model 6:
  other bits, so it prints how far its weights end from the others'.

Per stage (generate: `sample`; grade: the reward function; update: old log-probs and the PPO mini-batches;
other: the rest of the step, batching, the sampler, decoding text; held-out: the periodic evaluation, timed
once per path after the first method's steps), it prints the CPU seconds per step, the model FLOPs actually
computed (every linear, 2 x rows x in x out, and SDPA, 4 x rows x heads x queries x keys x head dim; under
autograd three times that, the backward's two matmuls per linear and about twice attention's forward), the
achieved FLOP/s, the matmul rate, and the bound ratio: the seconds the path's own product (`torch.mm`, or
`repro.cpu_lm.blas`'s numpy one) alone needs in this process for those same matmuls (forward and backward ones
each in its own layout, timed right after each run at powers of two of rows and interpolated; attention's
FLOPs at the stage's matmul rate) over the stage's seconds. 1.0 would be a stage that does nothing but its
matmuls at the library's rate; under the arithmetic pin torch's rate is MKL's reproducible (COMPATIBLE)
kernel's, OpenBLAS's that of its pinned Haswell kernels. The isolated timing keeps its operands in cache, so
the ratio is an upper view of the headroom: in the step the same matmuls run on fresh activations, beside
whatever shares the core.

    python benchmarks/bench_cpu_step.py [--steps 4] [--methods grpo-n4,grpo-n16,seq-balance | all]
        [--paths transformers,compact-torch,compact] [--batch N]

Seconds are this process's CPU seconds (`time.process_time`; one torch thread), which a loaded machine
disturbs far less than the wall clock. The first step of each run is left out (one-off imports and
allocations). Compare the paths within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from repro import arithmetic

arithmetic.pin()  # as `repro run` computes: before torch loads

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from repro import catalog  # noqa: E402
from repro.cell import resolve_cell  # noqa: E402
from repro.cell_config import resolve_cpu_config  # noqa: E402
from repro.cpu_lm import blas, qwen2_forward  # noqa: E402
from repro.cpu_lm.qwen2_forward import FORCE_TRANSFORMERS_ENV  # noqa: E402
from repro.local import responses as responses_module  # noqa: E402
from repro.local import trainer as trainer_module  # noqa: E402
from repro.rundir import RunDir  # noqa: E402

# CPU seconds of this process, not wall-clock: the paths run one thread each, and on a shared machine the wall
# clock measures the neighbours' load as much as the step (a run beside a test loop saw 4x swings between runs)
clock = time.process_time
STAGES = ("generate", "grade", "update", "other", "step", "held-out")
# per path: REPRO_TRANSFORMERS_FORWARD, and whose products the compact forward computes with
PATHS = {"transformers": ("1", "torch"), "compact-torch": ("0", "torch"), "compact": ("0", "openblas")}
PRODUCTS_ENV = "BENCH_CPU_STEP_PRODUCTS"  # the child's: torch or openblas


class Meter:
    """Seconds and FLOPs per stage of the current run; matmul shapes per stage for the bound."""

    def __init__(self) -> None:
        self.stage = "other"
        self.seconds: dict[str, float] = defaultdict(float)
        self.flops: dict[str, float] = defaultdict(float)
        self.attn_flops: dict[str, float] = defaultdict(float)
        self.matmuls: dict[str, dict[tuple[str, int, int, int], int]] = defaultdict(lambda: defaultdict(int))
        self.counting = False
        self.bound: dict[str, float] = {}  # per stage, the seconds torch.mm needs for its matmuls

    @contextmanager
    def timed(self, stage: str):
        outer, self.stage = self.stage, stage
        t0 = clock()
        try:
            yield
        finally:
            self.seconds[stage] += clock() - t0
            self.stage = outer

    def wrap(self, stage: str, fn: Callable) -> Callable:
        def inner(*args, **kwargs):
            with self.timed(stage):
                return fn(*args, **kwargs)

        return inner

    def _counted(self) -> str:
        return "other" if self.stage == "step" else self.stage  # in the step, outside a named stage

    def linear(self, rows: int, k: int, n: int, backward: bool) -> None:
        """One F.linear of [rows, k] by [n, k]; under autograd also its backward's two matmuls, the input's
        gradient [rows, n] x [n, k] and the weight's [n, rows] x [rows, k]."""
        if self.counting:
            stage = self._counted()
            kinds = ("forward", "grad_input", "grad_weight") if backward else ("forward",)
            self.flops[stage] += 2.0 * rows * k * n * len(kinds)
            for kind in kinds:
                self.matmuls[stage][(kind, rows, k, n)] += 1

    def attention(self, flops: float) -> None:
        if self.counting:
            self.flops[self._counted()] += flops
            self.attn_flops[self._counted()] += flops

    def add(self, other: Meter) -> None:
        for key in ("seconds", "flops", "attn_flops"):
            for stage, value in getattr(other, key).items():
                getattr(self, key)[stage] += value
        for stage, shapes in other.matmuls.items():
            for shape, passes in shapes.items():
                self.matmuls[stage][shape] += passes

    def close_step(self) -> None:
        """'other' as the step's seconds not in a named stage; the step's FLOPs and matmuls as all stages'."""
        named = ("generate", "grade", "update")
        self.seconds["other"] = self.seconds["step"] - sum(self.seconds[s] for s in named)
        for key in ("flops", "attn_flops"):
            getattr(self, key)["step"] = sum(getattr(self, key)[s] for s in (*named, "other"))
        for stage in (*named, "other"):
            for shape, passes in self.matmuls[stage].items():
                self.matmuls["step"][shape] += passes


METER = Meter()
_linear, _sdpa = F.linear, F.scaled_dot_product_attention


def _counting(linear: Callable) -> Callable:
    def counted(x, weight, bias=None):
        grad = torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)
        METER.linear(x.numel() // x.shape[-1], weight.shape[1], weight.shape[0], grad)
        return linear(x, weight, bias)

    return counted


_counted_linear = _counting(_linear)


def _counted_sdpa(q, k, v, *args, **kwargs):
    grad = torch.is_grad_enabled() and q.requires_grad
    METER.attention(4.0 * q.shape[0] * q.shape[1] * q.shape[2] * k.shape[-2] * q.shape[-1] * (3 if grad else 1))
    return _sdpa(q, k, v, *args, **kwargs)


class MatmulRate:
    """Seconds of one product (`torch.mm`, or `repro.cpu_lm.blas`'s) in the layout autograd runs it (the forward:
    [rows, k] by a stored [n, k] weight transposed; the input's gradient: [rows, n] by [n, k]; the weight's:
    [rows, n] transposed by [rows, k]), timed at powers of two of rows and interpolated between them."""

    def __init__(self, product: Callable = torch.mm) -> None:
        self._timed: dict[tuple[str, int, int, int], float] = {}
        self.product = product

    def _time(self, kind: str, rows: int, k: int, n: int) -> float:
        key = (kind, rows, k, n)
        if key not in self._timed:
            x, w, g = torch.randn(rows, k), torch.randn(n, k), torch.randn(rows, n)
            a, b = {"forward": (x, w.t()), "grad_input": (g, w), "grad_weight": (g.t(), x)}[kind]
            self.product(a, b)
            reps, t0 = 0, clock()
            while reps < 5 or clock() - t0 < 0.02:
                self.product(a, b)
                reps += 1
            self._timed[key] = (clock() - t0) / reps
        return self._timed[key]

    def seconds(self, kind: str, rows: int, k: int, n: int) -> float:
        lo = 1 << (rows.bit_length() - 1)  # the power of two at or below rows
        if lo == rows:
            return self._time(kind, rows, k, n)
        t_lo, t_hi = self._time(kind, lo, k, n), self._time(kind, 2 * lo, k, n)
        return t_lo + (t_hi - t_lo) * (rows - lo) / lo


def bound_seconds(rate: MatmulRate, meter: Meter, stage: str) -> float:
    """The seconds torch.mm alone takes for the stage's matmuls, and for attention's FLOPs at the stage's own
    matmul rate."""
    mm = sum(rate.seconds(*shape) * count for shape, count in meter.matmuls[stage].items())
    linear_flops = meter.flops[stage] - meter.attn_flops[stage]
    if linear_flops <= 0:
        return 0.0
    return mm * meter.flops[stage] / linear_flops


def run_cell(method: str, steps: int, batch: int | None, root: Path, heldout: bool) -> tuple[Meter, dict]:
    """`steps` train steps of the method's cell in this process; the meter of steps 2.. and the final weights."""
    cell = resolve_cell("tiny-arith", method)
    config, _note = resolve_cpu_config(cell, steps, batch)
    rundir = RunDir.prepare(root / method, config.to_dict(), ["bench", method])
    trainer = trainer_module.CpuTrainer(config, rundir)
    total = Meter()
    responses_module.sample = METER.wrap("generate", responses_module.sample)
    responses_module.compute_score = METER.wrap("grade", responses_module.compute_score)
    trainer._update = METER.wrap("update", trainer._update)
    for step in range(1, steps + 1):
        METER.__init__()
        METER.counting = True
        with METER.timed("step"):
            trainer.train_step(step)
        METER.close_step()
        if step > 1:
            total.add(METER)
    if heldout and trainer.heldout is not None:
        METER.__init__()
        METER.counting = True
        with METER.timed("held-out"):
            trainer.heldout(trainer.model, config.seed, steps)
        total.add(METER)
    # the matmul rate of the path's own product, measured right after the run, in the same stretch of load
    rate = MatmulRate(blas._matmul if os.environ.get(PRODUCTS_ENV) == "openblas" else torch.mm)
    total.bound = {stage: bound_seconds(rate, total, stage) for stage in list(total.seconds)}
    return total, trainer.model.state_dict()


def run_one(args: argparse.Namespace) -> None:
    """The child process of one (method, path) run: its meter as JSON and its final weights into --out."""
    F.linear, F.scaled_dot_product_attention = _counted_linear, _counted_sdpa
    # the compact forward's products (read when a forward is built): counted either way
    qwen2_forward.LINEAR = _counting(blas.linear) if os.environ.get(PRODUCTS_ENV) == "openblas" else _counted_linear
    out = Path(args.out)
    meter, weights = run_cell(args.run_one, args.steps, args.batch, out, args.heldout)
    record = {key: dict(getattr(meter, key)) for key in ("seconds", "flops", "attn_flops", "bound")}
    (out / "meter.json").write_text(json.dumps(record))
    torch.save(weights, out / "weights.pt")


def run_child(method: str, path: str, args: argparse.Namespace, out: Path, heldout: bool) -> tuple[Meter, dict]:
    """One run in a fresh process: a second run in the same process found the grader's caches warm."""
    out.mkdir(parents=True)
    command = [sys.executable, __file__, "--run-one", method, "--out", str(out), "--steps", str(args.steps)]
    command += ["--batch", str(args.batch)] if args.batch else []
    command += ["--heldout"] if heldout else []
    forced, products = PATHS[path]
    subprocess.run(command, check=True, env={**os.environ, FORCE_TRANSFORMERS_ENV: forced, PRODUCTS_ENV: products})
    meter = Meter()
    for key, values in json.loads((out / "meter.json").read_text()).items():
        getattr(meter, key).update(values)
    return meter, torch.load(out / "weights.pt")


def table(meters: dict[str, Meter], measured: int) -> list[str]:
    lines = [
        f"{'stage':<10}{'path':<14}{'s/step':>9}{'GFLOP/step':>12}{'GFLOP/s':>9}{'mm GFLOP/s':>12}{'bound ratio':>13}"
    ]
    for stage in STAGES:
        for path, meter in meters.items():
            if stage not in meter.seconds:
                continue
            per = 1 if stage == "held-out" else measured
            seconds, flops = meter.seconds[stage] / per, meter.flops[stage] / per
            bound = meter.bound.get(stage, 0.0) / per
            achieved = flops / seconds / 1e9 if seconds > 0 else 0.0
            mm_rate = flops / bound / 1e9 if bound > 0 else float("nan")
            ratio = bound / seconds if seconds > 0 else float("nan")
            lines.append(
                f"{stage:<10}{path:<14}{seconds:>9.3f}{flops / 1e9:>12.4f}{achieved:>9.2f}"
                f"{mm_rate:>12.2f}{ratio:>13.3f}"
            )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4, help="steps per run; the first is left out")
    parser.add_argument("--methods", default="grpo-n4,grpo-n16,seq-balance", help="comma-separated, or all")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--batch", type=int, default=None, help="prompts per step (default: the cell's)")
    parser.add_argument("--run-one", help=argparse.SUPPRESS)  # a child: this method, the path from the env
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--heldout", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        run_one(args)
        return
    methods = list(catalog.methods()) if args.methods == "all" else [m.strip() for m in args.methods.split(",")]
    paths = [p.strip() for p in args.paths.split(",")]
    from repro.cpu_lm.model import ensure_tiny_model
    from repro.tasks.tiny_arith import ensure_data

    ensure_data(0)
    ensure_tiny_model()
    print(
        f"tiny-arith, CPU path, {args.steps} steps per run (first left out), {arithmetic.describe()}\n"
        f"cpu: {arithmetic.cpu_model()}, torch threads 1, one process per run"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for index, method in enumerate(methods):
            meters, weights = {}, {}
            for path in paths:
                out = Path(tmp) / f"{method}-{path}"
                meters[path], weights[path] = run_child(method, path, args, out, index == 0)
            notes = []
            if "transformers" in weights and "compact-torch" in weights:
                a, b = weights["transformers"], weights["compact-torch"]
                equal = all(torch.equal(a[k], b[k]) for k in a)
                notes.append(f"weights after {args.steps} steps bitwise transformers': {'yes' if equal else 'NO'}")
            if "compact" in weights and len(weights) > 1:
                other = next(p for p in weights if p != "compact")
                a, b = weights["compact"], weights[other]
                worst = max(float((a[k] - b[k]).abs().max()) for k in a)
                notes.append(f"OpenBLAS's weights within {worst:.1e} of {other}'s")
            step = {p: m.seconds["step"] / (args.steps - 1) for p, m in meters.items()}
            if len(paths) > 1:
                notes.append(f"step speed-up {paths[0]} -> {paths[-1]}: {step[paths[0]] / step[paths[-1]]:.2f}x")
            print(f"\n== {method}" + "".join(f" | {n}" for n in notes), flush=True)
            print("\n".join(table(meters, args.steps - 1)), flush=True)


if __name__ == "__main__":
    main()
