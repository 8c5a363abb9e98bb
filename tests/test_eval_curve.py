"""Ave@k over training steps: `repro collect` keeps every evaluated checkpoint, `repro table weighted-average`
reads only the final one unless `--checkpoint STEP`, and `repro plot eval-curve` draws the per-step seed
mean (checked against values worked out here by hand, not by the code under test).

The run folders are synthetic (RunDir.prepare + MetricsWriter, as test_collect's verl test builds one)
with eval/global_step_<k>/summary.json written in `repro eval`'s shape: no model, no training, fast.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from typer.testing import CliRunner

from repro.commands import plot as plot_commands
from repro.commands import table as table_commands
from repro.report import plots, style, tables
from repro.report.collect import collect
from repro.report.figures import eval_curve as eval_curve_module
from repro.report.results_files import read_results
from repro.report.schema import WEIGHTED_AVERAGE
from repro.rundir import MetricsWriter, RunDir

BACKBONE = "tiny-arith"
METHODS = ("grpo-n4", "seq-balance")
SEEDS = (0, 1)
STEPS = (10, 20, 30)
SIZES = {"tiny-minerva": 40, "tiny-aime": 10}
K = 4


def _value(method: str, seed: int, step: int, benchmark: str) -> float:
    """A distinct, hand-checkable Ave@k per run x step x benchmark: Seq climbs twice as fast as GRPO."""
    start = {"grpo-n4": 0.30, "seq-balance": 0.32}[method]
    climb = {"grpo-n4": 0.01, "seq-balance": 0.02}[method] * step / 10
    offset = {"tiny-minerva": 0.10, "tiny-aime": -0.20}[benchmark]
    return round(start + climb + offset + 0.04 * seed, 6)


def _weighted(method: str, seed: int, step: int) -> float:
    total = sum(SIZES.values())
    return sum(_value(method, seed, step, b) * n for b, n in SIZES.items()) / total


def _summary(values: dict[str, float]) -> dict:
    """An eval summary as `repro eval` writes it: per benchmark, plus the weighted average and its weights."""
    total = sum(SIZES.values())
    return {
        "k": K,
        "benchmarks": {
            b: {"problems": SIZES[b], "samples_per_problem": K, "ave_at_k": v, "pass_at_k": {"1": v}}
            for b, v in values.items()
        },
        "weighted_average": sum(values[b] * SIZES[b] for b in values) / total,
        "weighted_pass_at_k": {"1": sum(values[b] * SIZES[b] for b in values) / total},
        "weights": dict(SIZES),
    }


def _run(root: Path, method: str, seed: int, steps: tuple[int, ...]) -> Path:
    """A finished run folder with a few logged steps and an eval summary at each of `steps`."""
    name = f"{BACKBONE}__{method}__standard__s{seed}"
    config = {"backbone": BACKBONE, "method": method, "prompt_set": "standard", "seed": seed}
    run = RunDir.prepare(root / name, config, ["repro", "run"])
    attempt = run.begin_attempt()
    with MetricsWriter(attempt) as log:
        for step in range(1, max(steps) + 1):
            log.log(step, {"critic/rewards/mean": 0.01 * step})
    run.end_attempt("finished")
    for step in steps:
        folder = run.eval_dir / f"global_step_{step}"
        folder.mkdir(parents=True)
        values = {b: _value(method, seed, step, b) for b in SIZES}
        (folder / "summary.json").write_text(json.dumps(_summary(values)))
    return run.path


def _model_folder(root: Path, key: str, marker: dict, values: dict[str, float]) -> None:
    """A model run folder (`repro eval NAME`): model_eval.json and eval/summary.json, no status.json."""
    folder = root / key
    (folder / "eval").mkdir(parents=True)
    (folder / "model_eval.json").write_text(json.dumps(marker))
    (folder / "eval" / "summary.json").write_text(json.dumps(_summary(values)))


@pytest.fixture(scope="module")
def grid(tmp_path_factory) -> tuple[Path, pd.DataFrame]:
    """2 methods x 2 seeds, each evaluated at steps 10, 20, 30, collected: (results folder, eval table)."""
    root = tmp_path_factory.mktemp("runs")
    for method in METHODS:
        for seed in SEEDS:
            _run(root, method, seed, STEPS)
    results = tmp_path_factory.mktemp("results")
    collect(root, results)
    return results, read_results(results)["eval"]


def _lines(ax) -> dict:
    return {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}


def _band(ax, label: str) -> dict[float, tuple[float, float]]:
    """x -> (lowest y, highest y) of the fill_between band of `label`."""
    from matplotlib.collections import PolyCollection

    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_label().startswith(f"_{label} ")]
    out: dict[float, list[float]] = {}
    for x, y in band.get_paths()[0].vertices:
        out.setdefault(round(float(x), 9), []).append(float(y))
    return {x: (min(ys), max(ys)) for x, ys in out.items()}


def _visible(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible()]


# ------------------------------------------------------------------------- collect and the table


def test_collect_keeps_every_checkpoint_of_every_run(grid):
    _, ev = grid
    runs = {f"{BACKBONE}__{m}__standard__s{s}" for m in METHODS for s in SEEDS}
    weighted = ev[ev["benchmark"] == WEIGHTED_AVERAGE]
    assert set(zip(weighted["run"], weighted["checkpoint_step"], strict=True)) == {(r, k) for r in runs for k in STEPS}
    assert len(weighted) == 12 and len(ev) == 12 * (len(SIZES) + 1)
    assert not ev.duplicated(["run", "checkpoint_step", "benchmark"]).any()
    for row in weighted.itertuples():
        assert row.ave_at_k == pytest.approx(_weighted(row.method, row.seed, row.checkpoint_step), abs=1e-12)
        assert row.problems == sum(SIZES.values())


def _table_row(table: pd.DataFrame, method: str) -> pd.Series:
    (index,) = table.index[(table["method"] == method) & (table["prompt_set"] == "standard")]
    return table.loc[index]


def _by_hand(step: int) -> dict[str, dict[str, float]]:
    """Per method the table's numbers at `step`, worked out here: seed means in percent, one decimal."""
    out = {}
    for method in METHODS:
        row = {
            f"{b} measured": round(100 * sum(_value(method, s, step, b) for s in SEEDS) / len(SEEDS), 1) for b in SIZES
        }
        row["weighted measured"] = round(100 * sum(_weighted(method, s, step) for s in SEEDS) / len(SEEDS), 1)
        out[method] = row
    return out


def test_the_table_reads_the_final_checkpoint_unless_asked_for_a_step(grid, tmp_path):
    results, ev = grid
    final = tables.weighted_average_table(ev, measured_only=True)
    assert list(final["method"]) == list(METHODS)
    for method, expected in _by_hand(STEPS[-1]).items():
        row = _table_row(final, method)
        assert row["n_seeds"] == len(SEEDS)
        for column, value in expected.items():
            assert row[column] == pytest.approx(value, abs=1e-9), (method, column)
    assert _by_hand(STEPS[-1]) != _by_hand(20)  # the steps differ, so the checks below can tell them apart

    runner = CliRunner()
    for args, step in (([], STEPS[-1]), (["--checkpoint", "20"], 20)):
        out = tmp_path / f"table-{step}-{len(args)}.csv"
        argv = ["weighted-average", "--results", str(results), "--measured-only", "--out", str(out), *args]
        result = runner.invoke(table_commands.app, argv)
        assert result.exit_code == 0, result.output
        table = pd.read_csv(out)
        for method, expected in _by_hand(step).items():
            row = _table_row(table, method)
            for column, value in expected.items():
                assert row[column] == pytest.approx(value, abs=1e-9), (args, method, column)


# --------------------------------------------------------------------------------------- the figure


def test_the_figure_is_the_per_step_seed_mean_with_a_min_max_band(grid):
    _, ev = grid
    assert plots.eval_curve is eval_curve_module.eval_curve
    fig, missing = plots.eval_curve(ev, expected={})
    assert missing == [f"backbone {BACKBONE}: no base model evaluated (no dashed reference)"]
    (ax,) = _visible(fig)
    assert ax.get_title() == f"{BACKBONE} (standard prompts)"
    assert ax.get_ylabel() == f"weighted Ave@{K} (%)" and ax.get_xlabel().strip()
    assert fig.get_suptitle() == f"weighted Ave@{K} of every evaluated checkpoint against training step"
    assert "mean over seeds" in fig.get_supxlabel() and eval_curve_module.ONE_CHECKPOINT_NOTE not in fig.get_supxlabel()
    lines = _lines(ax)
    assert list(lines) == list(METHODS)
    for method in METHODS:
        per_step = [[100 * _weighted(method, s, k) for s in SEEDS] for k in STEPS]
        line = lines[method]
        np.testing.assert_array_equal(line.get_xdata(), STEPS)
        np.testing.assert_allclose(line.get_ydata(), [sum(v) / len(v) for v in per_step], atol=1e-9)
        assert line.get_marker() == "o" and to_hex(line.get_color()) == style.METHOD_COLORS[method]
        band = _band(ax, method)
        np.testing.assert_allclose([band[k] for k in STEPS], [(min(v), max(v)) for v in per_step], atol=1e-9)
    # Seq climbs faster: its lead grows from step to step
    lead = lines["seq-balance"].get_ydata() - lines["grpo-n4"].get_ydata()
    assert np.all(np.diff(lead) > 0)


def test_one_benchmark_instead_of_the_weighted_average(grid):
    _, ev = grid
    fig, _ = plots.eval_curve(ev, benchmark="tiny-aime", expected={})
    (ax,) = _visible(fig)
    assert ax.get_ylabel() == f"Ave@{K} on tiny-aime (%)"
    for method, line in _lines(ax).items():
        hand = [100 * sum(_value(method, s, k, "tiny-aime") for s in SEEDS) / len(SEEDS) for k in STEPS]
        np.testing.assert_allclose(line.get_ydata(), hand, atol=1e-9)
    fig, missing = plots.eval_curve(ev, benchmark="math500", expected={})
    assert (
        missing[0]
        == f"no trained run has 'math500' rows (the eval table has tiny-aime, tiny-minerva, {WEIGHTED_AVERAGE})"
    )
    assert not _lines(_visible(fig)[0])


def test_base_model_is_a_dashed_reference_and_released_checkpoints_are_left_out(tmp_path):
    root = tmp_path / "runs"
    for seed in SEEDS:
        _run(root, "grpo-n4", seed, STEPS)
    base = {b: 0.1 + 0.05 * i for i, b in enumerate(SIZES)}
    marker = {"kind": "base-model", "key": BACKBONE, "backbone": BACKBONE, "method": None}
    _model_folder(root, BACKBONE, marker, base)
    released = {"kind": "released-checkpoint", "key": "tiny-released", "backbone": BACKBONE}
    _model_folder(root, "tiny-released", {**released, "method": "seq-balance", "prompt_set": "standard"}, base)
    collect(root, tmp_path / "results")
    ev = read_results(tmp_path / "results")["eval"]

    fig, missing = plots.eval_curve(ev, expected={})
    assert missing == ["tiny-released: a released checkpoint, not drawn (no training step)"]
    (ax,) = _visible(fig)
    lines = _lines(ax)
    assert list(lines) == ["grpo-n4", eval_curve_module.BASE_LABEL]
    reference = lines[eval_curve_module.BASE_LABEL]
    weighted = 100 * sum(base[b] * n for b, n in SIZES.items()) / sum(SIZES.values())
    assert reference.get_linestyle() == "--"
    np.testing.assert_allclose(reference.get_ydata(), [weighted, weighted], atol=1e-9)
    np.testing.assert_array_equal(lines["grpo-n4"].get_xdata(), STEPS)  # step 0 of the base rows is not a point
    assert "dashed: the base model" in fig.get_supxlabel()


def test_final_checkpoints_only_still_draw_points_and_say_so(tmp_path):
    root = tmp_path / "runs"
    for method in METHODS:
        for seed in SEEDS:
            _run(root, method, seed, (STEPS[-1],))
    collect(root, tmp_path / "results")
    ev = read_results(tmp_path / "results")["eval"]
    fig, _ = plots.eval_curve(ev, expected={})
    (ax,) = _visible(fig)
    assert eval_curve_module.ONE_CHECKPOINT_NOTE in fig.get_supxlabel() and "error bar" in fig.get_supxlabel()
    assert ax.get_legend().get_title().get_text() == eval_curve_module.POINT_LEGEND
    for method, line in _lines(ax).items():
        values = [100 * _weighted(method, s, STEPS[-1]) for s in SEEDS]
        np.testing.assert_array_equal(line.get_xdata(), [STEPS[-1]])
        np.testing.assert_allclose(line.get_ydata(), [sum(values) / len(values)], atol=1e-9)
        assert line.get_marker() == "o"
        (spread,) = [c for c in ax.containers if c.get_label() == f"_{method} spread"]  # the error bar
        segment = spread.lines[2][0].get_segments()[0]
        np.testing.assert_allclose(sorted(segment[:, 1]), [min(values), max(values)], atol=1e-9)


def test_seeds_evaluated_at_different_steps_are_named(tmp_path):
    root = tmp_path / "runs"
    _run(root, "grpo-n4", 0, STEPS)
    _run(root, "grpo-n4", 1, (STEPS[-1],))
    collect(root, tmp_path / "results")
    fig, missing = plots.eval_curve(read_results(tmp_path / "results")["eval"], expected={})
    assert any("grpo-n4 (standard): seeds evaluated at different steps" in line for line in missing)
    (line,) = _lines(_visible(fig)[0]).values()
    hand = [100 * _weighted("grpo-n4", 0, 10), 100 * _weighted("grpo-n4", 0, 20)]
    hand.append(100 * (_weighted("grpo-n4", 0, 30) + _weighted("grpo-n4", 1, 30)) / 2)
    np.testing.assert_allclose(line.get_ydata(), hand, atol=1e-9)
    assert eval_curve_module.ONE_CHECKPOINT_NOTE not in fig.get_supxlabel()


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_writes_the_figure_and_lists_what_is_missing(grid, tmp_path):
    results, _ = grid
    runner = CliRunner()
    result = runner.invoke(plot_commands.app, ["eval-curve", "--results", str(results)])
    assert result.exit_code == 0, result.output
    for suffix in ("png", "pdf"):
        path = results / "figures" / f"eval-curve.{suffix}"
        assert f"wrote {path}" in result.output and path.stat().st_size > 1000
    assert "not in this figure" in result.output and "no base model evaluated" in result.output
    argv = ["eval-curve", "--results", str(results), "--benchmark", "tiny-aime"]
    result = runner.invoke(plot_commands.app, argv)
    assert result.exit_code == 0, result.output
    assert (results / "figures" / "eval-curve-tiny-aime.pdf").stat().st_size > 1000
    help_text = runner.invoke(plot_commands.app, ["eval-curve", "--help"]).output
    assert "Examples" in help_text and "repro plot eval-curve" in help_text and "--benchmark" in help_text
    result = runner.invoke(plot_commands.app, ["eval-curve", "--results", str(tmp_path / "nowhere")])
    assert str(result.exception) == f"no results in {tmp_path / 'nowhere'}; run `repro collect` first"
