"""`repro simulate ...`: sampling statistics at paper scale with no model."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from repro import catalog
from repro.arithmetic import usable_cores
from repro.atomic import write_text
from repro.commands.options import option_groups
from repro.console import progress_bar, stderr_console, stdout_console
from repro.errors import ReproError
from repro.simulate import pass_rates as pr
from repro.simulate.parallel import run_methods
from repro.simulate.sampling import simulate_method
from repro.simulate.signal_loss import signal_loss

app = typer.Typer(
    help="Sampling statistics at paper scale, with Bernoulli rewards instead of a model.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

# The paper's Figure 2 statistics for Qwen2.5-Math-1.5B on an OpenR1 subset (paper/signal_loss.csv).
PAPER_PASS_AT_1, PAPER_PASS_AT_K, PAPER_K = 0.265, 0.813, 256

PassAt1 = Annotated[float, typer.Option("--pass-at-1", help="Mean pass rate of the prompts (fits a Beta).")]
PassAtK = Annotated[float, typer.Option("--pass-at-k", help="pass@k of the prompts (fits a Beta with pass@1).")]
KOpt = Annotated[int, typer.Option("--k", help="The k of --pass-at-k.")]
AlphaOpt = Annotated[float | None, typer.Option("--alpha", help="Beta(alpha, beta) pass rates, given directly.")]
BetaOpt = Annotated[float | None, typer.Option("--beta", help="See --alpha.")]
FileOpt = Annotated[
    Path | None,
    typer.Option(
        "--pass-rates",
        help="Per-prompt pass rates: .txt/.csv (one per line or a pass_rate column), .json or .parquet.",
    ),
]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed for prompts, rewards and every sampler decision.")]
JobsOpt = Annotated[
    int,
    typer.Option(
        "--jobs",
        min=0,
        help="Methods simulated at once, each in its own process; 0: one per usable CPU, or 1 for a small run. "
        "The numbers do not depend on it.",
    ),
]
MethodsOpt = Annotated[str, typer.Option("--methods", help="Comma-separated method keys, or 'all'.")]
BatchOpt = Annotated[int, typer.Option("--batch", min=1, help="Prompts per step.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document instead of tables.")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Also write the JSON document to this file (atomically).")]


@dataclass(frozen=True)
class PassRateOptions:
    """The options that choose the prompts' pass rates, which every `repro simulate` command takes (in its
    signature as one parameter of this type: `option_groups`)."""

    pass_at_1: PassAt1 = PAPER_PASS_AT_1
    pass_at_k: PassAtK = PAPER_PASS_AT_K
    k: KOpt = PAPER_K
    alpha: AlphaOpt = None
    beta: BetaOpt = None
    pass_rates: FileOpt = None

    def resolve(self) -> pr.PassRates:
        if self.pass_rates is not None:
            if self.alpha is not None or self.beta is not None:
                raise ReproError("give either --pass-rates or --alpha/--beta, not both")
            return pr.from_file(self.pass_rates)
        if (self.alpha is None) != (self.beta is None):
            raise ReproError("--alpha and --beta go together; give both")
        if self.alpha is not None:
            return pr.from_beta(self.alpha, self.beta)
        return pr.from_pass_at_k(self.pass_at_1, self.pass_at_k, self.k)


_PARALLEL_FROM = 4096  # steps x batch below which worker processes cost more than they save


def _each_method(methods: str, seed: int, steps: int, task, kwargs: dict, jobs: int, share_streams: bool) -> list:
    """`task(name, spec, **kwargs)` for every named method (or 'all'), `jobs` at a time (0: one per CPU when the
    run is big enough to repay starting processes), under one progress bar of `steps` per method."""
    names = (
        list(catalog.methods()) if methods.strip() == "all" else [m.strip() for m in methods.split(",") if m.strip()]
    )
    specs = list({name: catalog.get_method(name).sampler_spec(seed=seed) for name in names}.items())
    if jobs == 0:
        big = steps * kwargs.get("batch", 1) >= _PARALLEL_FROM
        jobs = usable_cores() if big else 1
    with progress_bar(stderr_console()) as progress:
        task_id = progress.add_task("simulating", total=steps * len(specs))
        if jobs <= 1 or len(specs) <= 1:
            return run_methods(
                task, specs, kwargs, jobs=1, share_streams=share_streams,
                on_step=lambda: progress.advance(task_id),
                on_start=lambda name: progress.update(task_id, description=f"simulating {name}"),
            )  # fmt: skip
        progress.update(task_id, description=f"simulating {len(specs)} methods, {min(jobs, len(specs))} at a time")
        return run_methods(
            task, specs, kwargs, jobs=jobs, share_streams=share_streams,
            on_done=lambda name: progress.advance(task_id, steps),
        )  # fmt: skip


def _fmt(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _emit(doc: dict, as_json: bool, out: Path | None) -> bool:
    """Write/print the JSON document; True when that is all the caller should print."""
    text = json.dumps(doc, indent=2)
    if out is not None:
        write_text(out, text + "\n")
        stderr_console().print(f"wrote {out}")
    if as_json:
        typer.echo(text)
    return as_json


def _pair(mc: float | None, exact: float | None, digits: int = 3) -> str:
    if mc is None:
        return "—"
    return f"{_fmt(mc, digits)} ({_fmt(exact, digits)})"


@app.command("sampling")
@option_groups
def sampling(
    *,
    methods: MethodsOpt = "all",
    rate_options: PassRateOptions,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Training steps to simulate.")] = 600,
    batch: BatchOpt = 512,
    dataset_size: Annotated[
        int,
        typer.Option("--dataset-size", min=1, help="Prompts in the simulated training set (Beta sources)."),
    ] = 16384,
    seed: SeedOpt = 0,
    jobs: JobsOpt = 0,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Run every method through the sampling core against Bernoulli rewards; MC beside exact values.

        Columns: responses drawn per prompt (mean, p95; DAPO: per update prompt, p95 over steps), the share of
    update groups with signal (both correct and wrong responses), the share of drawn prompts with zero
    gradient (all rewards equal), and Seq's unresolved share. "exact" columns are closed forms evaluated on
    the same prompts (Est's conditional on its allocations).

    Examples:

      repro simulate sampling

      repro simulate sampling --methods grpo-n4,seq-balance --steps 100 --json

      repro simulate sampling --alpha 0.5 --beta 1.5
    """
    import numpy as np

    rates = rate_options.resolve()
    dataset = rates.dataset(dataset_size, np.random.default_rng(seed))
    kwargs = {"pass_rates": dataset, "steps": steps, "batch": batch, "seed": seed}
    results = _each_method(methods, seed, steps, simulate_method, kwargs, jobs, share_streams=False)
    settings = {"steps": steps, "batch": batch, "dataset_size": int(dataset.size), "seed": seed}
    doc = {"pass_rates": rates.to_dict(), "settings": settings, "methods": [r.to_dict() for r in results]}
    if _emit(doc, as_json, out):
        return
    table = Table(
        title=f"Sampling at paper scale: {rates.description}; {steps} steps x {batch} prompts",
        caption="each cell: Monte Carlo (exact); exact values are closed forms on the same prompts",
    )
    for col in (
        "method",
        "draws/prompt mean",
        "draws p95",
        "signal share",
        "zero-grad share",
        "unresolved",
        "s",
    ):
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in results:
        e = r.exact
        table.add_row(
            r.method,
            _pair(r.draws_mean, e.get("draws_mean"), 2),
            _pair(r.draws_p95, e.get("draws_p95"), 0),
            _pair(r.signal_share, e.get("signal_share")),
            _pair(r.zero_grad_share, e.get("zero_grad_share")),
            _pair(r.unresolved_share, e.get("unresolved_share")),
            f"{r.seconds:.1f}",
        )
    stdout_console().print(table)


@app.command("signal-loss")
@option_groups
def signal_loss_cmd(
    *,
    rate_options: PassRateOptions,
    max_n: Annotated[int | None, typer.Option("--max-n", min=1, help="Largest group size (default: --k).")] = None,
    show: Annotated[
        str | None,
        typer.Option("--show", help="Comma-separated n to print in the table (default: every n; JSON has all)."),
    ] = None,
    mc_prompts: Annotated[int, typer.Option("--mc-prompts", min=1, help="Prompts in the Monte-Carlo check.")] = 20000,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """All-correct and all-wrong group shares against group size n (the paper's Figure 2 logic).

        Fits a Beta to pass@1 and pass@k (default: the paper's Qwen2.5-Math-1.5B figures, 26.5% and 81.3% at
    k=256), then prints E[p^n] and E[(1-p)^n] exactly and by Monte Carlo for n = 1..k.

    Examples:

      repro simulate signal-loss --pass-at-1 0.265 --pass-at-k 0.813 --k 256

      repro simulate signal-loss --alpha 0.3 --beta 0.8 --max-n 64 --show 1,4,16,64

      repro simulate signal-loss --json
    """
    rates = rate_options.resolve()
    top = max_n or rate_options.k
    result = signal_loss(rates, top, mc_prompts, seed)
    all_rows = rows = result.rows()
    if show:
        try:
            wanted = {int(x) for x in show.split(",") if x.strip()}
        except ValueError as exc:
            raise ReproError(f"--show takes comma-separated integers, got {show!r}") from exc
        bad = sorted(n for n in wanted if not 1 <= n <= top)
        if bad:
            raise ReproError(f"--show values {bad} are outside 1..{top}; raise --max-n or drop them")
        rows = [r for r in rows if r["n"] in wanted]
    doc = {"pass_rates": rates.to_dict(), "mc_prompts": mc_prompts, "seed": seed, "rows": all_rows}
    if _emit(doc, as_json, out):
        return
    table = Table(title=f"Signal loss under {rates.description}")
    for col in ("n", "all-correct", "MC", "all-wrong", "MC", "signal (mixed)", "pass@n"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(
            str(r["n"]),
            f"{r['all_correct']:.4f}",
            f"{r['mc_all_correct']:.4f}",
            f"{r['all_wrong']:.4f}",
            f"{r['mc_all_wrong']:.4f}",
            f"{r['signal']:.4f}",
            f"{r['pass_at_n']:.4f}",
        )
    stdout_console().print(table)


# Table 2 of the paper: step time relative to GRPO-n4 on Qwen2.5-Math-1.5B, 8xH100 (paper/step_time csv).
PAPER_RATIOS_1_5B = {"seq-pos": 2.2, "seq-balance": 2.8, "est": 1.3}


@app.command("cost")
@option_groups
def cost(
    *,
    methods: MethodsOpt = "all",
    rate_options: PassRateOptions,
    steps: Annotated[int, typer.Option("--steps", min=1, help="Steps to average over.")] = 4,
    batch: BatchOpt = 512,
    dataset_size: Annotated[int, typer.Option("--dataset-size", min=1, help="Prompts in the training set.")] = 16384,
    replicas: Annotated[int, typer.Option("--replicas", min=1, help="Inference servers (vLLM replicas).")] = 8,
    capacity: Annotated[int, typer.Option("--capacity", min=1, help="Sequences a server decodes at once.")] = 256,
    t0: Annotated[float, typer.Option("--t0", min=0.0, help="Seconds per decode iteration, fixed part.")] = 0.012,
    t1: Annotated[float, typer.Option("--t1", min=0.0, help="Seconds per decode iteration per sequence.")] = 6e-5,
    prefill: Annotated[float, typer.Option("--prefill-per-token", min=0.0, help="Prefill seconds/token.")] = 2e-5,
    prompt_tokens: Annotated[int, typer.Option("--prompt-tokens", min=1, help="Tokens per prompt.")] = 300,
    len_correct: Annotated[float, typer.Option("--len-correct", min=1.0, help="Median tokens, correct.")] = 600.0,
    len_incorrect: Annotated[float, typer.Option("--len-incorrect", min=1.0, help="Median tokens, wrong.")] = 1000.0,
    len_sigma: Annotated[float, typer.Option("--len-sigma", min=0.0, help="Log-normal sigma of lengths.")] = 0.5,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=1, help="Response length cap.")] = 2048,
    train_per_token: Annotated[float, typer.Option("--train-per-token", min=0.0, help="s per update token.")] = 1.6e-5,
    train_fixed: Annotated[float, typer.Option("--train-fixed", min=0.0, help="s per step, fixed.")] = 8.0,
    overlap: Annotated[
        bool,
        typer.Option(
            "--overlap/--no-overlap",
            help="Also simulate the overlapped (async) schedule: verl's colocate_async with streamed rounds.",
        ),
    ] = True,
    ahead: Annotated[
        int,
        typer.Option(
            "--ahead",
            min=0,
            help="Async: steps in flight beyond the one training (verl's num_warmup_batches; 2 as the async "
            "cells run, see repro/catalog/async_schedule.yaml; verl's default is 1).",
        ),
    ] = 2,
    train_steps: Annotated[
        int | None,
        typer.Option(
            "--train-steps",
            min=1,
            help="The run length the 'n4 steps' column converts (default: the paper's, from the catalog).",
        ),
    ] = None,
    seed: SeedOpt = 0,
    jobs: JobsOpt = 0,
    as_json: JsonOpt = False,
    out: OutOpt = None,
) -> None:
    """Wall-clock per step of every method on a continuous-batching server model, beside the paper's Table 2.

    Every method runs through the sampling core against Bernoulli rewards; requests go to `--replicas`
    servers of `--capacity` slots, where one decode iteration costs `t0 + t1 * running` and a prompt's
    prefill stalls its server. Lengths are log-normal (correct and wrong responses have their own median),
    capped at `--max-tokens`. A step is generation (until its last response) plus training
    (`--train-fixed` + `--train-per-token` x update tokens). Defaults model Qwen2.5-Math-1.5B on one
    8xH100 node (TP=1), calibrated so GRPO-n4 lands near the paper's 102 s/step.

    Three schedules: a method's own (synchronous rounds with a barrier, or streamed rounds for the -stream
    variants), and with --overlap the async one of verl's colocate_async trainer: every prompt streams its
    rounds, the next step's prompts (--ahead) are already in the servers while this step's slowest prompts
    finish, and the servers sleep during each update (repro.simulate.overlap).

    Columns: responses and generated tokens per step; generation, training and step seconds; the step
    time relative to GRPO-n4's synchronous step (paper's value in brackets); the async step and its ratio
    to the same reference, with the most updates a trained prompt's first request was behind; the floor
    (the step's tokens at peak throughput plus its update) as a ratio; the two lower bounds on generation
    (tokens at peak throughput, the longest chain of one prompt's batches); generation over the tighter one;
    "n4 steps": the GRPO-n4 steps that generate as many tokens as the method's --train-steps (the paper's 600):
    how long a GRPO-n4 baseline trains to match the method's compute.

    Examples:

      repro simulate cost

      repro simulate cost --methods grpo-n4,seq-balance,seq-balance-stream --capacity 512 --json

      repro simulate cost --len-correct 800 --len-incorrect 800   # lengths that do not depend on correctness

      repro simulate cost --no-overlap --steps 8   # the synchronous schedules only, averaged over more steps

      repro simulate cost --methods grpo-n4,seq-balance --steps 48   # the async step a long run settles at
    """
    import numpy as np

    from repro.simulate.cost import LengthModel, TrainModel, add_ratios, simulate_cost
    from repro.simulate.engine import ServerModel
    from repro.simulate.overlap import STEADY_MIN_STEPS

    if train_steps is None:
        train_steps = int(catalog.hyperparameters()["total_training_steps"].value)
    rates = rate_options.resolve()
    server = ServerModel(replicas, capacity, t0, t1, prefill, prompt_tokens)
    lengths = LengthModel(len_correct, len_incorrect, len_sigma, max_tokens)
    train = TrainModel(train_per_token, train_fixed)
    dataset = rates.dataset(dataset_size, np.random.default_rng(seed))
    kwargs = {
        "pass_rates": dataset, "server": server, "lengths": lengths, "train": train, "steps": steps, "batch": batch,
        "seed": seed, "overlap": overlap, "ahead": ahead,
    }  # fmt: skip
    # the overlapped schedule advances the bar once
    results = _each_method(methods, seed, steps + int(overlap), simulate_cost, kwargs, jobs, share_streams=True)
    add_ratios(results)
    settings = {
        "steps": steps,
        "batch": batch,
        "dataset_size": int(dataset.size),
        "seed": seed,
        "overlap": overlap,
        "ahead": ahead,
        "train_steps": train_steps,
    }
    for r in results:
        r.grpo_n4_steps_at_equal_tokens = (
            None if r.tokens_ratio_to_grpo_n4 is None else round(r.tokens_ratio_to_grpo_n4 * train_steps)
        )
    doc = {
        "pass_rates": rates.to_dict(),
        "settings": settings,
        "server": server.to_dict() | {"peak_tokens_per_s": server.peak_throughput},
        "lengths": lengths.__dict__,
        "train": train.__dict__,
        "paper_ratios_1_5b": PAPER_RATIOS_1_5B,
        "methods": [r.to_dict() for r in results],
    }
    if _emit(doc, as_json, out):
        return
    table = Table(
        title=f"Step cost on {replicas} x {capacity}-slot servers ({server.peak_throughput:,.0f} tokens/s peak); "
        f"{rates.description}; {steps} steps x {batch} prompts",
        caption="ratio: step time / GRPO-n4's synchronous step (paper Table 2, Qwen2.5-Math-1.5B, in brackets); "
        "async: the overlapped schedule over this run (steady: a long run's step, the mean gap between updates "
        f"without the first and last, with --steps {STEADY_MIN_STEPS + 2} or more; stale: most updates a trained "
        "prompt was behind); floor: tokens at peak throughput + update, over the same reference; bound: tokens / "
        f"peak; chain: longest chain of one prompt; n4 steps: GRPO-n4 steps generating the tokens of {train_steps} "
        "of the method's",
    )
    ref = next((r for r in results if r.method == "grpo-n4"), None)
    columns = ["method", "responses", "tokens", "gen s", "train s", "step s", "ratio"]
    if overlap:
        columns += ["async s", "async ratio", "steady", "stale", "floor"]
    columns += ["bound s", "chain s", "gen/bound", "n4 steps"]
    for col in columns:
        table.add_column(col, justify="left" if col == "method" else "right")
    for r in results:
        paper = PAPER_RATIOS_1_5B.get(r.method)
        ratio = "—" if r.ratio_to_grpo_n4 is None else f"{r.ratio_to_grpo_n4:.2f}"
        row = [
            r.method,
            f"{r.responses:,.0f}",
            f"{r.generated_tokens / 1e6:.2f}M",
            f"{r.generation_s:.1f}",
            f"{r.train_s:.1f}",
            f"{r.step_s:.1f}",
            ratio + (f" ({paper})" if paper else ""),
        ]
        if overlap:
            row += [
                f"{r.async_step_s:.1f}",
                "—" if r.async_ratio_to_grpo_n4 is None else f"{r.async_ratio_to_grpo_n4:.2f}",
                "—" if r.async_steady_ratio_to_grpo_n4 is None else f"{r.async_steady_ratio_to_grpo_n4:.2f}",
                str(r.async_staleness_max),
                "—" if ref is None else f"{r.floor_s / ref.step_s:.2f}",
            ]
        row += [f"{r.lower_bound_s:.1f}", f"{r.critical_path_s:.1f}", f"{r.generation_over_both_bounds:.2f}"]
        row += ["—" if r.grpo_n4_steps_at_equal_tokens is None else f"{r.grpo_n4_steps_at_equal_tokens:,}"]
        table.add_row(*row)
    stdout_console().print(table)
