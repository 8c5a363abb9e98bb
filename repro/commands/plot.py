"""`repro plot ...`: the paper's figures from results/ (written by `repro collect`) as PNG + PDF."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from repro.console import stdout_console
from repro.errors import ReproError
from repro.report.schema import DEFAULT_RESULTS, WEIGHTED_AVERAGE

if TYPE_CHECKING:
    import pandas as pd  # not at run time: every `repro` process imports this module to build the CLI

app = typer.Typer(
    help=(
        "The paper's figures from results/ (run `repro collect` first), written as PNG (150 dpi) and PDF.\n\n"
        "Each figure draws whatever part of the grid exists and prints what it lacks.\n\n"
        "Examples:\n\n"
        "  repro collect && repro plot reward-curve\n\n"
        "  repro plot step-time --no-paper\n\n"
        "  repro plot eval-curve --benchmark math500\n\n"
        "  repro plot signal-loss --runs-root runs"
    ),
    no_args_is_help=True,
    rich_markup_mode="markdown",
)

ResultsOpt = Annotated[
    Path, typer.Option("--results", help="Folder of the tables `repro collect` wrote.", show_default=True)
]
RunsRootOpt = Annotated[
    Path, typer.Option("--runs-root", help="Runs root whose eval records (eval/global_step_*/*.jsonl) are read.")
]
OutOpt = Annotated[
    Path | None,
    typer.Option("--out", help="Output path without suffix; .png and .pdf are written. Default: RESULTS/figures/NAME."),
]
WindowOpt = Annotated[int, typer.Option("--window", min=1, help="Moving-average window in training steps.")]


def _table(results: Path, name: str) -> pd.DataFrame:
    """One table of results/; a missing folder or table is the user's to fix (run `repro collect`)."""
    if not results.is_dir():
        raise ReproError(f"no results in {results}; run `repro collect` first")
    from repro.report.results_files import read_results

    return read_results(results)[name]


def _finish(fig, missing: list[str], results: Path, out: Path | None, name: str) -> None:
    from repro.report.style import save

    paths = save(fig, out if out is not None else results / "figures" / name)
    console = stdout_console()
    for path in paths:
        console.print(f"wrote {path}", highlight=False, soft_wrap=True)
    if missing:
        console.print(f"not in this figure ({len(missing)}):", highlight=False)
        for line in missing:
            console.print(f"  - {line}", highlight=False, soft_wrap=True)


RewardOpt = Annotated[
    str,
    typer.Option(
        "--reward",
        help=(
            "Which reward: 'first' = per prompt the mean of its first draw, prompts weighted equally (the "
            "policy's pass rate, alike for every method); 'pool' = the mean over every drawn response (weights "
            "the prompts Seq keeps sampling); 'selected' = the update batch's (for Seq and DAPO the "
            "selected/balanced batch)."
        ),
    ),
]


@app.command("reward-curve")
def reward_curve_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    out: OutOpt = None,
    window: WindowOpt = 20,
    reward: RewardOpt = "first",
    metric: Annotated[
        str | None,
        typer.Option("--metric", help="Draw this logged training metric instead of a reward (e.g. actor/entropy)."),
    ] = None,
) -> None:
    """Training reward against step, a moving average, one panel per backbone (Figures 2 and 6).

    By default the mean reward of each prompt's first draw (sized before any reward is seen, so every
    method estimates the policy's pass rate alike); `--reward pool` draws the mean over all drawn responses
    and `--reward selected` the update batch's reward instead, each labelled as such. One line per method
    x prompt set: the mean over seeds, with a band from the least to the greatest seed; hard and standard
    runs of one method share a colour and differ in line style.

    Examples:

      repro plot reward-curve

      repro plot reward-curve --window 50 --reward selected --out figs/reward-selected
    """
    from repro.report import plots

    fig, missing = plots.reward_curve(_table(results, "training"), reward=reward, window=window, metric=metric)
    _finish(fig, missing, results, out, "reward-curve" if reward == "first" or metric else f"reward-curve-{reward}")


@app.command("reward-entropy")
def reward_entropy_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS), out: OutOpt = None, window: WindowOpt = 20, reward: RewardOpt = "first"
) -> None:
    """The reward-entropy frontier: smoothed reward against smoothed policy entropy, one line per method
    (the mean over seeds, a band of the seeds' min-max reward; the dot marks the last step).

    Examples:

      repro plot reward-entropy

      repro plot reward-entropy --window 10 --reward selected
    """
    from repro.report import plots

    fig, missing = plots.reward_entropy(_table(results, "training"), window=window, reward=reward)
    _finish(fig, missing, results, out, "reward-entropy" if reward == "first" else f"reward-entropy-{reward}")


@app.command("heldout")
def heldout_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    out: OutOpt = None,
    window: Annotated[int, typer.Option("--window", min=1, help="Moving average over evaluation points.")] = 1,
) -> None:
    """Held-out accuracy against step per method: the CPU trainer scores a fixed set of test-tier problems
    every `eval_every` steps (`--set eval_every=N`, 0 = off); the mean over seeds with a min-max band.

    Examples:

      repro plot heldout

      repro plot heldout --window 2 --out figs/heldout
    """
    from repro.report import plots

    fig, missing = plots.heldout_curve(_table(results, "training"), window=window)
    _finish(fig, missing, results, out, "heldout")


@app.command("eval-curve")
def eval_curve_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    out: OutOpt = None,
    benchmark: Annotated[
        str,
        typer.Option(
            "--benchmark",
            help=f"The eval table's benchmark to draw: {WEIGHTED_AVERAGE!r} (problem-weighted over benchmarks) "
            "or one benchmark's name (e.g. math500).",
        ),
    ] = WEIGHTED_AVERAGE,
) -> None:
    """Ave@k (%) of every evaluated checkpoint against its training step: one panel per backbone x prompt
    set, one line per method (the mean over seeds, a band from the least to the greatest seed), a marker
    at each evaluated step; a base model evaluated by name is the dashed line. Released checkpoints have
    no training step and are left out (`repro table weighted-average` shows them).

    Evaluate every saved checkpoint first (`repro eval RUN --all-checkpoints`), then `repro collect`;
    with only final checkpoints each run is one point, and the figure says so.

    Examples:

      repro plot eval-curve

      repro plot eval-curve --benchmark math500 --out figs/eval-curve-math500
    """
    from repro.report import plots

    fig, missing = plots.eval_curve(_table(results, "eval"), benchmark=benchmark)
    name = "eval-curve" if benchmark == WEIGHTED_AVERAGE else "eval-curve-" + re.sub(r"[^\w.-]+", "_", benchmark)
    _finish(fig, missing, results, out, name)


@app.command("step-time")
def step_time_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    out: OutOpt = None,
    paper: Annotated[bool, typer.Option("--paper/--no-paper", help="Show the paper's Table 2 bars beside.")] = True,
) -> None:
    """Each method's mean wall-clock seconds per step (step 1 excluded) relative to grpo-n4's, with the
    paper's Table 2 ratios (8xH100) as hatched bars beside: its own backbone's, or Qwen2.5-Math-1.5B's for a
    backbone Table 2 does not time (the CPU miniature).

    Examples:

      repro plot step-time

      repro plot step-time --no-paper --out figs/step-time
    """
    from repro.report import plots

    fig, missing = plots.step_time(_table(results, "training"), paper=paper)
    _finish(fig, missing, results, out, "step-time")


@app.command("accuracy-tokens")
def accuracy_tokens_cmd(results: ResultsOpt = Path(DEFAULT_RESULTS), out: OutOpt = None) -> None:
    """Held-out accuracy against cumulative generated tokens, one line per method (seeds' min-max bars), with
    the equal-token budget `repro report` compares the methods at: the bench's matched-compute view.

    Examples:

      repro plot accuracy-tokens

      repro plot accuracy-tokens --out figs/accuracy-tokens
    """
    from repro.report.figures.compute import accuracy_vs_tokens

    fig, missing = accuracy_vs_tokens(_table(results, "eval"), _table(results, "training"))
    _finish(fig, missing, results, out, "accuracy-tokens")


@app.command("ave-tokens")
def ave_tokens_cmd(results: ResultsOpt = Path(DEFAULT_RESULTS), out: OutOpt = None) -> None:
    """Weighted Ave@k of every evaluated checkpoint against cumulative generated tokens, each run continued by
    its compute-matched long run (`sweeps/tiny-matched.yaml`), seeds' min-max bands, one panel per prompt set,
    with the equal-token readings of `repro report` marked.

    Examples:

      repro plot ave-tokens

      repro plot ave-tokens --out figs/ave-tokens
    """
    from repro.report.equal_tokens import equal_token_comparisons
    from repro.report.figures.ave_tokens import ave_vs_tokens
    from repro.report.results_files import read_results

    if not results.is_dir():
        raise ReproError(f"no results in {results}; run `repro collect` first")
    pairs = [(j.method, j.reference, j.prompt_set) for j in equal_token_comparisons()]
    fig, missing, _points = ave_vs_tokens(read_results(results), pairs)
    _finish(fig, missing, results, out, "ave-tokens")


@app.command("sampling")
def sampling_cmd(results: ResultsOpt = Path(DEFAULT_RESULTS), out: OutOpt = None, window: WindowOpt = 20) -> None:
    """Sampling dynamics of the Seq methods (Figure 5): additional samples per step; prompts still active
    after all rounds (missing positive / missing negative); prompts resolved within 2 rounds.

    Examples:

      repro plot sampling

      repro plot sampling --window 5
    """
    from repro.report import plots

    fig, missing = plots.sampling(_table(results, "training"), window=window)
    _finish(fig, missing, results, out, "sampling")


@app.command("passk")
def passk_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    runs_root: RunsRootOpt = Path("runs"),
    out: OutOpt = None,
) -> None:
    """pass@k of each run's final checkpoint against k (log2 axis), benchmark-weighted when available.

    Where a run's eval records are under --runs-root, pass@k is recomputed from them at every power of
    two up to the samples per problem; otherwise the ks of the eval summaries are drawn.

    Examples:

      repro plot passk

      repro plot passk --runs-root /data/runs --out figs/passk
    """
    from repro.report import plots

    eval_df = _table(results, "eval")
    fig, missing = plots.passk(eval_df, runs_root=runs_root if runs_root.is_dir() else None)
    if not runs_root.is_dir():
        missing.append(f"no runs root {runs_root}: pass@k only at the ks of the eval summaries")
    _finish(fig, missing, results, out, "passk")


@app.command("schedules")
def schedules_cmd(
    cost: Annotated[
        Path | None,
        typer.Option("--cost", help="JSON from `repro simulate cost --out FILE`. Default: RESULTS/simulate/cost.json."),
    ] = None,
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    out: OutOpt = None,
) -> None:
    """Step time per method under the cost model's three schedules: synchronous rounds, streamed rounds
    (the -stream variants) and the overlapped async schedule, as ratios to GRPO-n4's synchronous step, with
    the floor no schedule beats and the paper's Table 2 ratios marked.

    Examples:

      repro simulate cost --out results/simulate/cost.json && repro plot schedules

      repro plot schedules --cost my_cost.json --out figs/schedules
    """
    import json

    from repro.report.figures.schedules import schedules

    path = cost if cost is not None else results / "simulate" / "cost.json"
    if not path.is_file():
        raise ReproError(f"no cost file {path}; run `repro simulate cost --out {path}` first")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ReproError(f"{path} is not a cost file from `repro simulate cost --out` ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("methods"), list):
        raise ReproError(f"{path} is not a cost file from `repro simulate cost --out` (no methods list)")
    fig, missing = schedules(doc)
    _finish(fig, missing, results, out, "schedules")


@app.command("signal-loss")
def signal_loss_cmd(
    results: ResultsOpt = Path(DEFAULT_RESULTS),
    runs_root: RunsRootOpt = Path("runs"),
    out: OutOpt = None,
    max_n: Annotated[int, typer.Option("--max-n", min=1, help="Largest group size of the simulated curve.")] = 256,
) -> None:
    """Share of all-correct and all-wrong groups against group size n (Figure 2), from each run's final eval
    records under --runs-root; simulated from the paper's pass@1/pass@256 when there are none. The paper's
    reported points are marked.

    Needs no results/ folder: --results only sets the default output folder.

    Examples:

      repro plot signal-loss

      repro plot signal-loss --runs-root /data/runs/qwen2.5-math-1.5b__seq-balance__standard__s0
    """
    from repro.report import plots

    fig, missing = plots.signal_loss(runs_root, max_n=max_n)
    _finish(fig, missing, results, out, "signal-loss")
