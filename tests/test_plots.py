"""Figures: the plotted data (not just the files) against values recomputed here with pandas or by hand.

Real tables come from `repro collect` on the session fixture `tiny_runs` (grpo-n4, seq-balance, est on
tiny-arith, 4 steps, eval k=4 on two tiers); synthetic frames cover what the miniature cannot (several
seeds and prompt sets, the paper's 1.5B step times).
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex
from typer.testing import CliRunner

from repro import catalog
from repro.commands import plot as plot_commands
from repro.errors import ReproError
from repro.report import plots, style
from repro.report.schema import WEIGHTED_AVERAGE

TINY_METHODS = ["grpo-n4", "seq-balance", "est"]  # the paper's order (style.METHOD_ORDER)
TINY_GRID = {"tiny-arith": [*TINY_METHODS, "dapo", "seq-pos"]}


@pytest.fixture(scope="module")
def results(tiny_runs, tmp_path_factory):
    from repro.report.collect import collect
    from repro.report.results_files import read_results

    folder = tmp_path_factory.mktemp("results")
    collect(tiny_runs, folder)
    return folder, read_results(folder)


def _axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def _legend(ax) -> list[str]:
    legend = ax.get_legend()
    assert legend is not None, f"panel {ax.get_title()!r} has no legend"
    return [t.get_text() for t in legend.get_texts()]


def _data_lines(ax):
    return [line for line in ax.get_lines() if not line.get_label().startswith("_")]


def _assert_labelled(fig) -> None:
    assert fig.get_suptitle().strip()
    for ax in _axes(fig):
        assert ax.get_title().strip() and ax.get_xlabel().strip() and ax.get_ylabel().strip(), ax


def _synthetic_training() -> pd.DataFrame:
    """Two seeds x two prompt sets of grpo-n4 and seq-pos on the 1.5B backbone, with known values."""
    rng = np.random.default_rng(7)
    rows = []
    for method, prompt_set, seed in itertools.product(("grpo-n4", "seq-pos"), ("standard", "hard"), (0, 1)):
        for step in range(1, 9):
            rows.append(
                {
                    "run": f"qwen2.5-math-1.5b__{method}__{prompt_set}__s{seed}",
                    "backbone": "qwen2.5-math-1.5b",
                    "method": method,
                    "prompt_set": prompt_set,
                    "seed": seed,
                    "step": step,
                    "critic/rewards/mean": float(rng.random()),
                    "actor/entropy": float(rng.random()),
                    "timing_s/step": 1000.0
                    if step == 1
                    else float(10 + rng.random() * (3 if method == "seq-pos" else 1)),
                }
            )
    frame = pd.DataFrame(rows)
    frame["sampler/first_draw_reward_mean"] = np.random.default_rng(11).random(len(frame))
    frame["sampler/pool_reward_mean"] = np.random.default_rng(12).random(len(frame))
    return frame


# ---------------------------------------------------------------------------------------------- style


def test_every_method_has_a_distinct_fixed_colour():
    assert set(style.METHOD_COLORS) == set(style.METHOD_ORDER) == set(catalog.methods())
    assert len(set(style.METHOD_COLORS.values())) == len(style.METHOD_ORDER) == len(catalog.methods()) == 17
    assert style.method_color("not-a-method") == style.method_color("not-a-method")  # stable fallback


def test_save_writes_png_and_pdf_atomically(tmp_path, monkeypatch):
    fig, _ = plots.signal_loss(None, max_n=16)
    paths = style.save(fig, tmp_path / "figs" / "signal.png")  # a suffix given is dropped, both formats written
    assert [p.name for p in paths] == ["signal.png", "signal.pdf"]
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[0].stat().st_size > 1000
    assert paths[1].read_bytes()[:5] == b"%PDF-" and paths[1].stat().st_size > 1000
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["signal.pdf", "signal.png"]  # no temp files
    # a name with dots is kept whole, and a failed write leaves neither a temp file nor a half figure
    monkeypatch.setattr(fig, "savefig", lambda *a, **k: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError):
        style.save(fig, tmp_path / "figs" / "qwen2.5-math")
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["signal.pdf", "signal.png"]


# ---------------------------------------------------------------------------------------------- training


def test_reward_curve_plots_moving_averages_of_collected_runs(results):
    _, tables = results
    training = tables["training"]
    fig, missing = plots.reward_curve(training, window=2, expected=TINY_GRID)
    _assert_labelled(fig)
    (ax,) = _axes(fig)
    assert ax.get_title() == "tiny-arith"
    assert _legend(ax) == TINY_METHODS
    lines = _data_lines(ax)
    assert len(lines) == len(TINY_METHODS)
    for line in lines:
        run = training[training["method"] == line.get_label()].sort_values("step")
        expected = run["sampler/first_draw_reward_mean"].rolling(2, min_periods=1).mean()  # the default
        np.testing.assert_allclose(line.get_xdata(), run["step"].to_numpy())
        np.testing.assert_allclose(line.get_ydata(), expected.to_numpy())
        assert to_hex(line.get_color()) == style.METHOD_COLORS[line.get_label()]
    assert missing == ["tiny-arith: no training runs of dapo, seq-pos"]
    # the default grid is the paper's: every paper backbone is missing from the miniature
    _, default_missing = plots.reward_curve(training)
    assert any(m.startswith("backbone qwen2.5-math-1.5b: no training runs") for m in default_missing)


def test_heldout_curve_of_collected_runs_is_the_logged_accuracy(results, tiny_runs):
    """The tiny runs (4 steps, eval_every 10 by default) are scored at their first and last steps."""
    _, tables = results
    training = tables["training"]
    fig, missing = plots.heldout_curve(training, expected=TINY_GRID)
    assert missing == ["tiny-arith: no training runs of dapo, seq-pos"]
    (ax,) = _axes(fig)
    for line in _data_lines(ax):
        run = f"tiny-arith__{line.get_label()}__standard__s0"
        logged = {}
        for text in (tiny_runs / run / "metrics" / "attempt-001.jsonl").read_text().splitlines():
            record = json.loads(text)
            if "heldout/accuracy" in record["data"]:
                logged[record["step"]] = record["data"]["heldout/accuracy"]
        assert sorted(logged) == [1, 4]
        np.testing.assert_allclose(line.get_xdata(), [1, 4])
        np.testing.assert_allclose(line.get_ydata(), [100 * logged[1], 100 * logged[4]], atol=1e-9)


def test_reward_curve_averages_seeds_and_separates_prompt_sets():
    training = _synthetic_training()
    fig, missing = plots.reward_curve(training, window=3, expected={})
    assert missing == []
    (ax,) = _axes(fig)
    lines = {line.get_label(): line for line in _data_lines(ax)}
    assert list(lines) == ["grpo-n4 (standard)", "grpo-n4 (hard)", "seq-pos (standard)", "seq-pos (hard)"]
    for (method, prompt_set), group in training.groupby(["method", "prompt_set"]):
        per_step = group.groupby("step")["sampler/first_draw_reward_mean"].mean().sort_index()
        line = lines[f"{method} ({prompt_set})"]
        np.testing.assert_allclose(line.get_ydata(), per_step.rolling(3, min_periods=1).mean().to_numpy())
        assert line.get_linestyle() == ("-" if prompt_set == "standard" else "--")


def test_reward_entropy_frontier(results):
    _, tables = results
    training = tables["training"]
    fig, _ = plots.reward_entropy(training, window=3)
    _assert_labelled(fig)
    (ax,) = _axes(fig)
    assert _legend(ax) == TINY_METHODS
    lines = _data_lines(ax)
    assert len(lines) == len(TINY_METHODS)
    for line in lines:
        run = training[training["method"] == line.get_label()].sort_values("step")
        np.testing.assert_allclose(line.get_xdata(), run["actor/entropy"].rolling(3, min_periods=1).mean())
        reward = run["sampler/first_draw_reward_mean"].rolling(3, min_periods=1).mean()
        np.testing.assert_allclose(line.get_ydata(), reward)
    # the same method has the same colour here, in the reward curve and in the step-time bars
    curve, _ = plots.reward_curve(training)
    bars, _ = plots.step_time(training)
    colours = {line.get_label(): to_hex(line.get_color()) for line in lines}
    assert colours == {line.get_label(): to_hex(line.get_color()) for line in _data_lines(_axes(curve)[0])}
    bar_ax = _axes(bars)[0]
    ticks = [t.get_text() for t in bar_ax.get_xticklabels() if t.get_text() in colours]  # the paper's too
    measured = next(c for c in bar_ax.containers if c.get_label() == plots.MEASURED_LABEL)
    assert {m: to_hex(p.get_facecolor()) for m, p in zip(ticks, measured.patches, strict=True)} == colours


def _two_seeds() -> pd.DataFrame:
    """Two seeds each of grpo-n4 and seq-balance on tiny-arith, 5 steps, with hand-picked values: the
    first-draw reward, half of it as the pool reward (Seq oversamples hard prompts), the update batch's
    (Seq selects), and held-out accuracy at steps 1, 3 and 5."""
    pool = {("grpo-n4", 0): [0.1, 0.2, 0.3, 0.4, 0.5], ("grpo-n4", 1): [0.3, 0.2, 0.1, 0.6, 0.7]}
    pool |= {("seq-balance", 0): [0.2, 0.2, 0.4, 0.4, 0.6], ("seq-balance", 1): [0.0, 0.4, 0.4, 0.8, 0.6]}
    heldout = {("grpo-n4", 0): [0.25, 0.5, 0.5], ("grpo-n4", 1): [0.75, 0.25, 1.0]}
    heldout |= {("seq-balance", 0): [0.0, 0.5, 0.75], ("seq-balance", 1): [0.5, 0.5, 0.25]}
    rows = []
    for (method, seed), values in pool.items():
        for step, value in enumerate(values, start=1):
            rows.append(
                {
                    "run": f"tiny-arith__{method}__standard__s{seed}",
                    "backbone": "tiny-arith",
                    "method": method,
                    "prompt_set": "standard",
                    "seed": seed,
                    "step": step,
                    "sampler/first_draw_reward_mean": value,
                    "sampler/pool_reward_mean": value / 2,
                    "critic/rewards/mean": value if method == "grpo-n4" else 0.5,  # Seq's balanced batch
                    "actor/entropy": 1.0 - 0.1 * step + 0.05 * seed,
                    "heldout/accuracy": heldout[(method, seed)][(step - 1) // 2] if step % 2 else math.nan,
                    "heldout/n": 256.0 if step % 2 else math.nan,
                }
            )
    return pd.DataFrame(rows)


def _band(ax, label: str) -> dict[float, tuple[float, float]]:
    """x -> (lowest y, highest y) of the one band (a PolyCollection from fill_between) of `label`."""
    from matplotlib.collections import PolyCollection

    (band,) = [c for c in ax.collections if isinstance(c, PolyCollection) and c.get_label().startswith(f"_{label} ")]
    out: dict[float, list[float]] = {}
    for x, y in band.get_paths()[0].vertices:
        out.setdefault(round(float(x), 9), []).append(float(y))
    return {x: (min(ys), max(ys)) for x, ys in out.items()}


def _note(fig) -> str:
    """The figure's small print (its super x label): what the band is, and any per-run substitution."""
    return fig.get_supxlabel()


def _seed_curves(frame: pd.DataFrame, method: str, column: str, window: int) -> pd.DataFrame:
    """step x seed: each seed's own trailing moving average over the steps it logged `column`."""
    part = frame[frame["method"] == method].dropna(subset=[column])
    return part.pivot(index="step", columns="seed", values=column).apply(lambda s: s.dropna().rolling(window, 1).mean())


def test_reward_curve_is_the_seed_mean_of_the_first_draw_reward_with_a_min_max_band():
    training = _two_seeds()
    fig, missing = plots.reward_curve(training, window=2, expected={})
    assert missing == []
    (ax,) = _axes(fig)
    assert ax.get_ylabel() == "mean reward of each prompt's first draw\n(2-step moving average)"
    assert "each prompt's first draw" in fig.get_suptitle()
    assert _legend(ax) == ["grpo-n4", "seq-balance"] and ax.get_legend().get_title().get_text() == plots.BAND_LEGEND
    assert "band: min-max over seeds" in _note(fig)
    lines = {line.get_label(): line for line in _data_lines(ax)}
    # worked by hand for grpo-n4: seed 0 smoothed = .1 .15 .25 .35 .45; seed 1 = .3 .25 .15 .35 .65
    np.testing.assert_allclose(lines["grpo-n4"].get_ydata(), [0.2, 0.2, 0.2, 0.35, 0.55], atol=1e-12)
    band = _band(ax, "grpo-n4")
    np.testing.assert_allclose(
        [band[x] for x in (1, 2, 3, 4, 5)],
        [(0.1, 0.3), (0.15, 0.25), (0.15, 0.25), (0.35, 0.35), (0.45, 0.65)],
        atol=1e-12,
    )
    pool, _ = plots.reward_curve(training, reward="pool", window=2, expected={})
    assert _axes(pool)[0].get_ylabel() == "mean reward of all drawn responses\n(2-step moving average)"
    grpo_pool = next(line for line in _data_lines(_axes(pool)[0]) if line.get_label() == "grpo-n4")
    np.testing.assert_allclose(grpo_pool.get_ydata(), [0.1, 0.1, 0.1, 0.175, 0.275], atol=1e-12)  # half of above
    for method in ("grpo-n4", "seq-balance"):
        curves = _seed_curves(training, method, "sampler/first_draw_reward_mean", 2)
        np.testing.assert_allclose(lines[method].get_xdata(), curves.index.to_numpy())
        np.testing.assert_allclose(lines[method].get_ydata(), curves.mean(axis=1).to_numpy(), atol=1e-12)
        band = _band(ax, method)
        np.testing.assert_allclose([band[x][0] for x in curves.index], curves.min(axis=1), atol=1e-12)
        np.testing.assert_allclose([band[x][1] for x in curves.index], curves.max(axis=1), atol=1e-12)
        assert to_hex(lines[method].get_color()) == style.METHOD_COLORS[method]


def test_selected_reward_is_drawn_only_when_asked_and_labelled_as_the_selected_batch():
    training = _two_seeds()
    fig, _ = plots.reward_curve(training, reward="selected", window=1, expected={})
    (ax,) = _axes(fig)
    assert ax.get_ylabel() == "mean reward of the selected update batch\n(1-step moving average)"
    assert fig.get_suptitle().startswith("Mean reward of the selected update batch against step")
    seq = next(line for line in _data_lines(ax) if line.get_label() == "seq-balance")
    np.testing.assert_allclose(seq.get_ydata(), [0.5] * 5)  # the balanced batch, not the first draw's 0.0 ... 0.8
    frontier, _ = plots.reward_entropy(training, window=1, reward="selected", expected={})
    assert _axes(frontier)[0].get_ylabel().startswith("mean reward of the selected update batch")
    with pytest.raises(ReproError, match="--reward must be one of first, pool, selected"):
        plots.reward_curve(training, reward="update")


def test_a_run_without_the_first_draw_reward_falls_back_only_for_uniform_grpo():
    training = _two_seeds().drop(columns=["sampler/first_draw_reward_mean"])
    fig, missing = plots.reward_curve(training, window=1, expected={})
    (ax,) = _axes(fig)
    (line,) = _data_lines(ax)
    assert line.get_label() == "grpo-n4"  # its update batch is its pool: every response is kept
    grpo = training[training["method"] == "grpo-n4"]
    np.testing.assert_allclose(line.get_ydata(), grpo.groupby("step")["critic/rewards/mean"].mean())
    notes = _note(fig)
    assert "tiny-arith__grpo-n4__standard__s0: no sampler/first_draw_reward_mean; critic/rewards/mean drawn" in notes
    assert "equal by construction (uniform GRPO)" in notes
    assert missing == [
        f"run tiny-arith__seq-balance__standard__s{s}: no sampler/first_draw_reward_mean (its critic/rewards/mean "
        "is the update batch's, not the policy's)"
        for s in (0, 1)
    ] + ["tiny-arith seq-balance (standard): no values of mean reward of each prompt's first draw"]


def test_heldout_curve_is_the_seed_mean_in_percent_with_a_min_max_band(tmp_path):
    training = _two_seeds()
    fig, missing = plots.heldout_curve(training, expected={})
    assert missing == []
    _assert_labelled(fig)
    (ax,) = _axes(fig)
    assert ax.get_ylabel() == "held-out accuracy (%)" and "256 responses per evaluation" in fig.get_suptitle()
    lines = {line.get_label(): line for line in _data_lines(ax)}
    np.testing.assert_allclose(lines["grpo-n4"].get_xdata(), [1, 3, 5])
    np.testing.assert_allclose(lines["grpo-n4"].get_ydata(), [50.0, 37.5, 75.0], atol=1e-9)
    np.testing.assert_allclose(lines["seq-balance"].get_ydata(), [25.0, 50.0, 50.0], atol=1e-9)
    for method, expected in (
        ("grpo-n4", [(25, 75), (25, 50), (50, 100)]),
        ("seq-balance", [(0, 50), (50, 50), (25, 75)]),
    ):
        band = _band(ax, method)
        assert sorted(band) == [1.0, 3.0, 5.0]
        np.testing.assert_allclose([band[x] for x in sorted(band)], expected, atol=1e-9)
    paths = style.save(fig, tmp_path / "heldout")
    assert all(p.stat().st_size > 1000 for p in paths)
    _, lacking = plots.heldout_curve(training.drop(columns=["heldout/accuracy"]), expected={})
    assert lacking == ["no run logged 'heldout/accuracy' (a CPU run with eval_every > 0 does)"]


def test_reward_entropy_frontier_is_the_seed_mean_with_a_reward_band():
    training = _two_seeds()
    fig, missing = plots.reward_entropy(training, window=2, expected={})
    assert missing == []
    (ax,) = _axes(fig)
    for method in ("grpo-n4", "seq-balance"):
        line = next(line for line in _data_lines(ax) if line.get_label() == method)
        entropy = _seed_curves(training, method, "actor/entropy", 2)
        reward = _seed_curves(training, method, "sampler/first_draw_reward_mean", 2)
        np.testing.assert_allclose(line.get_xdata(), entropy.mean(axis=1), atol=1e-12)
        np.testing.assert_allclose(line.get_ydata(), reward.mean(axis=1), atol=1e-12)
        band = _band(ax, method)
        lows = [band[round(float(x), 9)][0] for x in entropy.mean(axis=1)]
        np.testing.assert_allclose(lows, reward.min(axis=1), atol=1e-12)
        assert [band[round(float(x), 9)][1] for x in entropy.mean(axis=1)] == pytest.approx(list(reward.max(axis=1)))
    assert "band: min-max over seeds" in _note(fig)


def test_step_time_bars_are_means_without_step_one(results):
    _, tables = results
    training = tables["training"]
    fig, missing = plots.step_time(training)
    _assert_labelled(fig)
    (ax,) = _axes(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["grpo-n4", "seq-pos", "seq-balance", "est"]  # + Table 2's
    measured, stand_in = ax.containers  # tiny-arith is not in Table 2: the paper's 1.5B stands beside it
    assert measured.get_label() == plots.MEASURED_LABEL
    assert stand_in.get_label() == "paper Table 2, qwen2.5-math-1.5b (8xH100)"
    expected = training[training["step"] != 1].groupby("method")["timing_s/step"].mean()
    ratios = [expected[m] / expected["grpo-n4"] for m in TINY_METHODS]
    np.testing.assert_allclose([p.get_height() for p in measured.patches], ratios)
    table2 = {"grpo-n4": 1.0, "seq-pos": 2.2, "seq-balance": 2.8, "est": 1.3}  # its relative_to_grpo column
    assert [p.get_height() for p in stand_in.patches] == list(table2.values())
    labels = [t.get_text() for t in ax.texts]
    assert labels[: len(ratios)] == [f"{r:.2f}x" for r in ratios]
    assert labels[len(ratios) :] == ["", "2.2x", "2.8x", "1.3x"]  # grpo-n4's 1x would sit on the measured 1.00x
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [plots.MEASURED_LABEL, stand_in.get_label()]
    assert legend.get_bbox_to_anchor().y1 < ax.get_window_extent().y0  # below the panel, clear of the bars
    assert "backbone qwen2.5-math-1.5b" in " ".join(missing)


def test_step_time_puts_the_paper_table_beside():
    training = _synthetic_training()
    fig, missing = plots.step_time(training, expected={"qwen2.5-math-1.5b": ["grpo-n4", "seq-pos", "est"]})
    (ax,) = _axes(fig)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["grpo-n4", "seq-pos", "seq-balance", "est"]
    measured = next(c for c in ax.containers if c.get_label() == plots.MEASURED_LABEL)
    paper = next(c for c in ax.containers if c.get_label() == plots.PAPER_LABEL)
    means = training[training["step"] > 1].groupby("method")["timing_s/step"].mean()
    np.testing.assert_allclose([p.get_height() for p in measured.patches], [1.0, means["seq-pos"] / means["grpo-n4"]])
    assert [p.get_height() for p in paper.patches] == [1.0, 2.2, 2.8, 1.3]  # Table 2's ratios, its own backbone
    assert all(p.get_hatch() for p in paper.patches)
    assert f"{means['seq-pos'] / means['grpo-n4']:.2f}x" in [t.get_text() for t in ax.texts]
    assert "qwen2.5-math-1.5b: no training runs of est" in missing
    assert "qwen2.5-math-1.5b: paper times but no runs of seq-balance, est" in missing
    assert "backbone qwen2.5-math-7b: paper Table 2 has times but there are no runs" in missing
    no_paper, _ = plots.step_time(training, paper=False)
    assert len(_axes(no_paper)[0].containers) == 1


def test_sampling_panels_show_the_seq_methods(results):
    _, tables = results
    training = tables["training"]
    fig, missing = plots.sampling(training, window=2, expected=TINY_GRID)
    _assert_labelled(fig)
    axes = _axes(fig)
    assert len(axes) == 3
    run = training[training["method"] == "seq-balance"].sort_values("step")
    for ax, (_, _, columns) in zip(axes, plots.SAMPLING_PANELS, strict=True):
        assert _legend(ax) == ["seq-balance"]  # grpo-n4 and est have no rounds
        lines = ax.get_lines()
        assert len(lines) == len(columns)
        for line, (column, style_, _) in zip(lines, columns, strict=True):
            np.testing.assert_allclose(line.get_ydata(), run[column].rolling(2, min_periods=1).mean())
            assert line.get_linestyle() == style_
    assert missing == ["tiny-arith: no Seq runs of seq-pos"]
    # a Seq run that did not log the sampler columns is named, and drawn nowhere
    lacking = training[training["method"] == "seq-balance"].assign(method="seq-pos")
    lacking = lacking.drop(columns=[plots.RESOLVED_2])
    fig, missing = plots.sampling(pd.concat([training, lacking]), expected={})
    assert _legend(_axes(fig)[0]) == ["seq-pos", "seq-balance"]
    assert _legend(_axes(fig)[2]) == ["seq-balance"]
    assert missing == [f"tiny-arith seq-pos (standard): no values of {plots.RESOLVED_2}"]


# ---------------------------------------------------------------------------------------------- evaluation


def test_passk_of_final_checkpoints(results, tiny_runs):
    _, tables = results
    eval_df = tables["eval"]
    weighted = eval_df[eval_df["benchmark"] == WEIGHTED_AVERAGE].set_index("method")
    fig, missing = plots.passk(eval_df, expected=TINY_GRID)
    _assert_labelled(fig)
    (ax,) = _axes(fig)
    assert ax.get_xscale() == "log"
    assert _legend(ax) == TINY_METHODS
    lines = ax.get_lines()
    assert len(lines) == len(TINY_METHODS)
    for line in lines:
        row = weighted.loc[line.get_label()]
        np.testing.assert_allclose(line.get_xdata(), [1, 2, 4])
        np.testing.assert_allclose(line.get_ydata(), [100 * row[f"pass@{k}"] for k in (1, 2, 4)])
    assert "tiny-arith: no evaluated runs of dapo, seq-pos" in missing
    # recomputed from the records under the runs root: the same numbers (pooled = problem-weighted)
    from_records, _ = plots.passk(eval_df, runs_root=tiny_runs)
    for line, again in zip(lines, _axes(from_records)[0].get_lines(), strict=True):
        np.testing.assert_allclose(again.get_ydata(), line.get_ydata())
    # without weighted rows: one panel per benchmark
    per_bench, _ = plots.passk(eval_df[eval_df["benchmark"] != WEIGHTED_AVERAGE])
    titles = sorted(ax.get_title() for ax in _axes(per_bench))
    assert titles == ["tiny-arith: tiny-aime", "tiny-arith: tiny-minerva"]
    assert all(len(ax.get_lines()) == 3 for ax in _axes(per_bench))


def _brute_force_shares(counts: list[tuple[int, int]], n: int) -> tuple[float, float]:
    """All-correct and all-wrong shares of n-subsets, by enumerating every subset of every problem."""
    correct, wrong = [], []
    for c, k in counts:
        outcomes = [1] * c + [0] * (k - c)
        subsets = list(itertools.combinations(outcomes, n))
        correct.append(sum(all(s) for s in subsets) / len(subsets))
        wrong.append(sum(not any(s) for s in subsets) / len(subsets))
    return float(np.mean(correct)), float(np.mean(wrong))


def _records(counts: list[tuple[int, int]]) -> list[dict]:
    return [
        {"benchmark": "b", "problem_id": str(i), "sample_index": j, "score": float(j < c)}
        for i, (c, k) in enumerate(counts)
        for j in range(k)
    ]


def test_signal_loss_from_records_matches_the_hand_computed_example():
    fig, missing = plots.signal_loss({"seq-balance": _records([(1, 4), (3, 4)])})
    _assert_labelled(fig)
    left, _ = _axes(fig)
    assert missing == []
    (correct,) = left.get_lines()
    np.testing.assert_allclose(correct.get_xdata(), [1, 2, 3, 4])
    # n=2: problem 1 has C(1,2)/C(4,2) = 0, problem 2 C(3,2)/C(4,2) = 3/6 -> mean 0.25
    np.testing.assert_allclose(correct.get_ydata(), [50.0, 25.0, 12.5, 0.0])
    assert to_hex(correct.get_color()) == style.METHOD_COLORS["seq-balance"]
    assert _legend(left) == ["seq-balance", "paper"]
    (paper,) = left.collections
    np.testing.assert_allclose(paper.get_offsets(), [[4, 35.3], [256, 10.2]])
    # an asymmetric case against enumeration of every subset
    counts = [(0, 6), (2, 6), (5, 6), (6, 6), (3, 6)]
    table = plots.share_all_correct(_records(counts))
    for n in range(1, 7):
        row = table[table["n"] == n].iloc[0]
        assert (row["all_correct"], row["all_wrong"]) == pytest.approx(_brute_force_shares(counts, n))
    fig, _ = plots.signal_loss(_records(counts))
    np.testing.assert_allclose(_axes(fig)[1].get_lines()[0].get_ydata(), 100 * table["all_wrong"])


def test_signal_loss_from_runs_and_simulated(tiny_runs, tmp_path):
    fig, missing = plots.signal_loss(tiny_runs)
    left, right = _axes(fig)
    assert _legend(left) == [*TINY_METHODS, "paper"] and _legend(right) == TINY_METHODS
    for line in left.get_lines():
        folder = tiny_runs / f"tiny-arith__{line.get_label()}__standard__s0" / "eval" / "global_step_4"
        scores: dict[tuple[str, str], list[float]] = {}
        for path in folder.glob("*.jsonl"):
            for text in path.read_text().splitlines():
                r = json.loads(text)
                scores.setdefault((path.stem, r["problem_id"]), []).append(r["score"])
        counts = [(int(sum(s)), len(s)) for s in scores.values()]
        expected = [100 * _brute_force_shares(counts, n)[0] for n in range(1, 5)]
        np.testing.assert_allclose(line.get_ydata(), expected)
    assert missing == []
    # no records: the Beta fitted to the paper's pass@1 / pass@256, E[p^n] in closed form
    from repro.simulate.pass_rates import beta_moment, fit_beta

    fig, missing = plots.signal_loss(tmp_path, max_n=64)
    assert any("no eval records under" in m for m in missing) and any("simulated" in m for m in missing)
    left, right = _axes(fig)
    (line,) = left.get_lines()
    a, b = fit_beta(0.265, 0.813, 256)
    np.testing.assert_allclose(line.get_ydata(), 100 * beta_moment(a, b, np.arange(1, 65)))
    np.testing.assert_allclose(right.get_lines()[0].get_ydata(), 100 * beta_moment(b, a, np.arange(1, 65)))
    assert math.isclose(line.get_ydata()[0], 26.5, rel_tol=1e-6)  # E[p] = pass@1


# ---------------------------------------------------------------------------------------------- CLI


def test_cli_writes_figures_and_lists_what_is_missing(results, tiny_runs, tmp_path):
    folder, _ = results
    runner = CliRunner()
    result = runner.invoke(plot_commands.app, ["reward-curve", "--results", str(tmp_path / "nowhere")])
    assert isinstance(result.exception, ReproError)
    assert str(result.exception) == f"no results in {tmp_path / 'nowhere'}; run `repro collect` first"
    out = tmp_path / "figs" / "sampling"
    result = runner.invoke(
        plot_commands.app, ["sampling", "--results", str(folder), "--out", str(out), "--window", "2"]
    )
    assert result.exit_code == 0, result.output
    assert f"wrote {out}.png" in result.output and f"wrote {out}.pdf" in result.output
    assert "no Seq runs" in result.output  # the paper's backbones are absent
    result = runner.invoke(plot_commands.app, ["step-time", "--results", str(folder)])
    assert result.exit_code == 0, result.output
    assert (folder / "figures" / "step-time.png").stat().st_size > 0
    result = runner.invoke(plot_commands.app, ["signal-loss", "--results", str(folder), "--runs-root", str(tiny_runs)])
    assert result.exit_code == 0, result.output
    assert (folder / "figures" / "signal-loss.pdf").stat().st_size > 0
    result = runner.invoke(plot_commands.app, ["heldout", "--results", str(folder)])
    assert result.exit_code == 0, result.output
    assert (folder / "figures" / "heldout.png").stat().st_size > 1000
    result = runner.invoke(plot_commands.app, ["reward-curve", "--results", str(folder), "--reward", "selected"])
    assert result.exit_code == 0, result.output
    assert (folder / "figures" / "reward-curve-selected.pdf").stat().st_size > 1000
    result = runner.invoke(plot_commands.app, ["reward-entropy", "--results", str(folder), "--reward", "batch"])
    assert isinstance(result.exception, ReproError) and "--reward must be one of first, pool, selected" in str(
        result.exception
    )
    help_text = runner.invoke(plot_commands.app, ["passk", "--help"]).output
    assert "Examples" in help_text and "repro plot passk" in help_text
