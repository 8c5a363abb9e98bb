"""The compute-matched baselines from the reference runs to the report (issue 45), on synthetic run folders
(RunDir.prepare + MetricsWriter + eval summaries in `repro eval`'s shape, as test_eval_curve builds them):
which side of a pair trains on and to what budget (`repro.sweep_matched`, checked against totals worked out
here), the long runs a matched sweep plans and the `repro run --extend` command it launches, the pairs read at
equal tokens (`repro.report.equal_tokens`) and the `ave-tokens` figure's points against the eval records.
The long run itself (`--extend`, bit for bit) is tests/test_token_budget.py's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from repro.errors import ReproError
from repro.report.collect import collect
from repro.report.equal_tokens import seed_pairs
from repro.report.figures.ave_tokens import ave_vs_tokens, method_curve
from repro.report.results_files import read_results
from repro.rundir import MetricsWriter, RunDir
from repro.sampling.metrics import GENERATED
from repro.sweep import load_sweep
from repro.sweep_matched import MatchedPair, extension, parse_pairs, targets

BACKBONE = "tiny-arith"
SIZES = {"tiny-minerva": 40, "tiny-aime": 10}
# tokens generated per step: Seq-balance draws 6x GRPO-n4's, Est 2x
PER_STEP = {"grpo-n4": 100, "est": 200, "seq-balance": 600}
STEPS = 10


def _summary(value: float) -> dict:
    total = sum(SIZES.values())
    return {
        "k": 4,
        "benchmarks": {b: {"problems": n, "samples_per_problem": 4, "ave_at_k": value} for b, n in SIZES.items()},
        "weighted_average": value,
        "weights": dict(SIZES),
        "_total": total,
    }


def _ave(method: str, seed: int, step: int) -> float:
    """A hand-checkable weighted Ave@k: rising with the step, a seed offset."""
    return round(0.05 + {"grpo-n4": 0.002, "est": 0.003, "seq-balance": 0.004}[method] * step + 0.01 * seed, 6)


def _finished(root: Path, name: str, config: dict, steps: range, tokens: int, evals: tuple[int, ...]) -> Path:
    run = RunDir.prepare(root / name, config, ["repro", "run"])
    attempt = run.begin_attempt()
    with MetricsWriter(attempt) as log:
        for step in steps:
            log.log(step, {GENERATED: tokens, "training/epochs_seen": step / 5})
    run.end_attempt("finished")
    for step in evals:
        folder = run.eval_dir / f"global_step_{step}"
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text(json.dumps(_summary(_ave(config["method"], config["seed"], step))))
    return run.path


def _config(method: str, seed: int, until: int = 0) -> dict:
    return {
        "backbone": BACKBONE,
        "method": method,
        "prompt_set": "standard",
        "seed": seed,
        "train": {"until_tokens": until},
    }


def _grid(root: Path, seeds=(0, 1, 2)) -> None:
    for seed in seeds:
        for method, per_step in PER_STEP.items():
            name = f"{BACKBONE}__{method}__standard__s{seed}"
            _finished(root, name, _config(method, seed), range(1, STEPS + 1), per_step, (STEPS,))


def test_the_side_with_fewer_tokens_trains_on_to_the_largest_total_it_is_compared_at() -> None:
    found = {m: (100, t) for m, t in {"a": 100, "b": 300, "c": 200, "d": 200}.items()}  # (last step, total)
    pairs = [
        MatchedPair("a", "b", "s"),
        MatchedPair("c", "a", "s"),
        MatchedPair("b", "c", "s"),
        MatchedPair("c", "d", "s"),
    ]
    assert targets(pairs, found) == {"a": [300, 200], "c": [300]}  # a tie (c, d) needs no long run
    # totals within the lower run's tokens per step (1000 / 10 steps = 100) are matched already
    near = {"e": (10, 1000), "f": (10, 1100), "g": (10, 1101)}
    assert targets([MatchedPair("e", "f", "s"), MatchedPair("e", "g", "s")], near) == {"e": [1101]}
    ext = extension(last_step=100, total=1000, wanted=[3000, 2000])
    assert ext.until_tokens == 3000
    # each total it is compared at and every fifth of the budget past the 1000 it has already, less the fifths
    # within a tenth of the budget (300) of a compared total: 1800 (200 from 2000), 2400 (kept: 400 away), 3000
    assert ext.keep_tokens == (1200, 2000, 2400, 3000)
    assert ext.steps == math.ceil(100 * 3000 / 1000 * 3)  # 3x the steps the budget needs at its tokens per step


def test_a_matched_sweep_file_is_checked_line_by_line(tmp_path) -> None:
    with pytest.raises(ReproError, match="is not 'METHOD vs REFERENCE'"):
        parse_pairs({"standard": ["seq-balance grpo-n4"]}, "f.yaml")
    with pytest.raises(ReproError, match="must map prompt sets"):
        parse_pairs(["seq-balance vs grpo-n4"], "f.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("backbones: [tiny-arith]\nmethods: [grpo-n4]\nmatched: {standard: [seq-balance vs grpo-n4]}\n")
    with pytest.raises(ReproError, match="outside the grid"):
        load_sweep(bad)
    gpu = tmp_path / "gpu.yaml"
    gpu.write_text("backbones: [qwen2.5-math-7b]\nmatched: {standard: [seq-balance vs grpo-n4]}\n")
    with pytest.raises(ReproError, match=r"only the CPU trainer does for now; on verl.*--until-tokens"):
        load_sweep(gpu)


def test_a_matched_sweep_plans_each_long_run_once_its_pairs_have_finished(tmp_path, capsys) -> None:
    root = tmp_path / "runs"
    _grid(root, seeds=(0,))
    sweep_file = tmp_path / "m.yaml"
    sweep_file.write_text(
        "backbones: [tiny-arith]\nseeds: [0, 1]\nmatched:\n  standard: [seq-balance vs grpo-n4, est vs grpo-n4]\n"
    )
    sweep = load_sweep(sweep_file)
    cells, waiting = sweep.matched_cells(root)
    # seed 0: GRPO-n4 (1,000 tokens at step 10) trains on to Seq-balance's 6,000, keeping Est's 2,000 on the way
    assert [c.name for c in cells] == [f"{BACKBONE}__grpo-n4__standard__s0__matched"]
    ext = cells[0].extension
    assert ext.until_tokens == 6000 and 2000 in ext.keep_tokens and ext.keep_tokens[-1] == 6000
    assert ext.steps == math.ceil(10 * 6000 / 1000 * 3)
    # seed 1 has no run yet: every method waits, nothing is planned for it
    assert len(waiting) == 3 and all("_s1" in line and "waits for" in line for line in waiting)
    from typer.testing import CliRunner

    from repro.cli import app

    shown = CliRunner().invoke(app, ["sweep", "run", str(sweep_file), "--runs-root", str(root), "--dry-run"])
    assert shown.exit_code == 0, shown.output
    assert shown.output.count("not yet: ") == 3  # seed 1's long runs, each with the runs it waits for
    line = next(x for x in shown.output.splitlines() if "--extend" in x)
    assert f"--extend {root.absolute()}/{BACKBONE}__grpo-n4__standard__s0 --until-tokens 6000" in line
    # fifths of 6000 less those within 600 of 2000 or 6000 (2400 is 400 away): 1200, 3600, 4800 and the totals
    assert "--set save_freq=180" in line and "keep_tokens=[1200,2000,3600,4800,6000]" in line


def _with_long_runs(root: Path) -> dict[int, int]:
    """The grid, then GRPO-n4's long runs to Seq-balance's 6,000 tokens (100 a step: step 60), evaluated at Est's
    2,000 (step 20) and at the fifths past step 10; returns each seed's reading step of Est's total."""
    _grid(root)
    for seed in (0, 1, 2):
        name = f"{BACKBONE}__grpo-n4__standard__s{seed}__matched"
        evals = (20, 24, 36, 48, 60)
        _finished(root, name, _config("grpo-n4", seed, until=6000), range(1, 61), 100, evals)
    return {seed: 20 for seed in (0, 1, 2)}


def test_pairs_are_read_at_equal_tokens_from_the_long_runs_and_the_figure_draws_the_eval_records(tmp_path) -> None:
    root, results = tmp_path / "runs", tmp_path / "results"
    _with_long_runs(root)
    collect(root, results)
    tables = read_results(results)
    assert set(tables["matched_training"]["run"]) == {
        f"{BACKBONE}__grpo-n4__standard__s{s}__matched" for s in (0, 1, 2)
    }
    assert not tables["training"]["run"].str.endswith("__matched").any()  # the per-step tables never see them
    pairs, missing = seed_pairs(tables, BACKBONE, "standard", "seq-balance", "grpo-n4")
    assert missing == [] and [p.seed for p in pairs] == [0, 1, 2]
    for p in pairs:  # Seq-balance at its step 10 (6,000 tokens) against GRPO-n4's long run at step 60
        assert (p.method.step, p.method.tokens, p.method.long_run) == (10, 6000, False)
        assert (p.reference.step, p.reference.tokens, p.reference.long_run) == (60, 6000, True)
        assert p.reference.epochs == pytest.approx(60 / 5) and p.method.epochs == pytest.approx(10 / 5)
        assert p.difference == pytest.approx(100 * (_ave("seq-balance", p.seed, 10) - _ave("grpo-n4", p.seed, 60)))
    est, _ = seed_pairs(tables, BACKBONE, "standard", "est", "grpo-n4")
    assert [(p.reference.step, p.reference.tokens) for p in est] == [(20, 2000)] * 3  # the first step reaching 2,000

    fig, missing, points = ave_vs_tokens(tables, [("seq-balance", "grpo-n4", "standard")])
    assert missing == []
    # every point drawn is an eval record: GRPO-n4's step 10 and its long run's five checkpoints, per seed
    n4 = points[points["method"] == "grpo-n4"]
    for seed in (0, 1, 2):
        mine = n4[n4["seed"] == seed].sort_values("tokens")
        assert mine["step"].tolist() == [10, 20, 24, 36, 48, 60]
        assert mine["tokens"].tolist() == [100.0 * s for s in (10, 20, 24, 36, 48, 60)]
        assert mine["ave"].tolist() == pytest.approx([100 * _ave("grpo-n4", seed, s) for s in (10, 20, 24, 36, 48, 60)])
    # the line: the seeds' mean on the grid, their min and max the band (seed offsets 0, 1 and 2 points)
    curve = method_curve(n4)
    assert curve["tokens"].iloc[0] == 1000 and curve["tokens"].iloc[-1] == 6000
    expected = np.mean([100 * _ave("grpo-n4", s, 60) for s in (0, 1, 2)])
    assert curve["ave"].iloc[-1] == pytest.approx(expected)
    assert curve["hi"].iloc[-1] - curve["lo"].iloc[-1] == pytest.approx(2.0)
    # seeds that share no span (one checkpoint in a seed): one point, each seed's last checkpoint, all seeds
    sb = points[points["method"] == "seq-balance"]
    assert method_curve(sb)[["tokens", "seeds"]].values.tolist() == [[6000.0, 3]]
    uneven = pd.DataFrame({"seed": [0, 1, 2, 2], "tokens": [10.0, 12.0, 11.0, 20.0], "ave": [1.0, 2.0, 3.0, 6.0]})
    assert method_curve(uneven).iloc[0].tolist() == [14.0, 3.0, 1.0, 6.0, 3]
    drawn = {tuple(np.round(line.get_xydata()[-1], 6)) for ax in fig.axes for line in ax.get_lines()}
    assert (6000.0, round(expected, 6)) in drawn  # the long run's reading, marked at the matched point
    import matplotlib.pyplot as plt

    plt.close(fig)
