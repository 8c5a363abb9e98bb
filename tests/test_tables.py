"""Paper-style tables from results/: numbers x100 beside the paper, deltas, missing cells, renderings, CLI."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import typer

from repro import cli
from repro.commands import table as table_commands
from repro.errors import ReproError
from repro.report import tables
from repro.report.schema import WEIGHTED_AVERAGE

SIZES = {"math500": 500, "minerva_math": 272, "olympiadbench": 675, "aime_like": 230}
Q15 = "qwen2.5-math-1.5b"


def _eval_rows(
    backbone: str,
    method: str,
    seed: int,
    step: int,
    values: dict[str, float],
    weighted: float | None,
    prompt_set: str = "standard",
    sizes: dict[str, int] = SIZES,
) -> list[dict]:
    run = f"{backbone}__{method}__{prompt_set}__s{seed}"
    keys = {"run": run, "backbone": backbone, "method": method, "prompt_set": prompt_set, "seed": seed}
    rows = [
        {**keys, "checkpoint_step": step, "benchmark": b, "problems": sizes[b], "k": 32, "ave_at_k": v, "pass@1": v}
        for b, v in values.items()
    ]
    if weighted is not None:
        total = sum(sizes[b] for b in values)
        rows.append(
            {
                **keys,
                "checkpoint_step": step,
                "benchmark": WEIGHTED_AVERAGE,
                "problems": total,
                "k": 32,
                "ave_at_k": weighted,
                "pass@1": weighted,
            }
        )
    return rows


def _all(value: float) -> dict[str, float]:
    return dict.fromkeys(SIZES, value)


@pytest.fixture
def eval_df() -> pd.DataFrame:
    rows = []
    # GRPO-n4: two seeds, 0.44 and 0.46 at the final step 100; an earlier checkpoint at 50
    for seed, value in ((0, 0.44), (1, 0.46)):
        rows += _eval_rows(Q15, "grpo-n4", seed, 50, _all(0.10), 0.10)
        rows += _eval_rows(Q15, "grpo-n4", seed, 100, _all(value), value)
    rows += _eval_rows(Q15, "seq-balance", 0, 50, _all(0.20), 0.20)
    rows += _eval_rows(
        Q15,
        "seq-balance",
        0,
        100,
        {"math500": 0.75, "minerva_math": 0.36, "olympiadbench": 0.41, "aime_like": 0.17},
        0.48,
    )
    # Est measured on two paper benchmarks only: no comparison with the paper's four-benchmark average
    rows += _eval_rows(Q15, "est", 0, 100, {"math500": 0.70, "aime_like": 0.15}, 0.60)
    return pd.DataFrame(rows)


def _row(table: pd.DataFrame, backbone: str, prompt_set: str, method: str) -> pd.Series:
    hit = table[(table["backbone"] == backbone) & (table["prompt_set"] == prompt_set) & (table["method"] == method)]
    assert len(hit) == 1, (backbone, prompt_set, method, len(hit))
    return hit.iloc[0]


# ------------------------------------------------------------------------------ weighted average


def test_measured_values_are_percent_of_the_inputs_seeds_averaged_at_the_final_step(eval_df) -> None:
    table = tables.weighted_average_table(eval_df)
    grpo = _row(table, Q15, "standard", "grpo-n4")
    assert grpo["n_seeds"] == 2
    for bench in SIZES:
        assert grpo[f"{bench} measured"] == pytest.approx(45.0)
    assert grpo["weighted measured"] == pytest.approx(45.0)
    seq = _row(table, Q15, "standard", "seq-balance")
    assert seq["math500 measured"] == pytest.approx(75.0)
    assert seq["minerva_math measured"] == pytest.approx(36.0)
    assert seq["olympiadbench measured"] == pytest.approx(41.0)
    assert seq["aime_like measured"] == pytest.approx(17.0)
    assert seq["math500 paper"] == pytest.approx(77.4)

    early = tables.weighted_average_table(eval_df, checkpoint=50)
    assert _row(early, Q15, "standard", "seq-balance")["weighted measured"] == pytest.approx(20.0)
    assert _row(early, Q15, "standard", "grpo-n4")["weighted measured"] == pytest.approx(10.0)
    assert math.isnan(_row(early, Q15, "standard", "est")["weighted measured"])  # est has no step 50


def test_delta_to_paper_and_to_grpo_n4(eval_df) -> None:
    table = tables.weighted_average_table(eval_df)
    seq = _row(table, Q15, "standard", "seq-balance")
    assert seq["weighted measured"] == 48.0
    assert seq["weighted paper"] == 47.6
    assert seq["delta paper"] == 0.4
    # paired on the one seed both trained: 48.0 - 44.0 (not 48.0 - mean(44, 46)); one seed, no interval
    assert seq["delta grpo-n4"] == 4.0 and seq["n_paired"] == 1
    assert math.isnan(seq["delta grpo-n4 95% low"]) and math.isnan(seq["delta grpo-n4 95% high"])
    assert math.isnan(seq["weighted measured 95% low"])  # one seed: its value, n=1, no interval
    grpo = _row(table, Q15, "standard", "grpo-n4")
    assert grpo["delta paper"] == -0.3  # 45.0 - 45.3
    assert grpo["delta grpo-n4"] == 0.0 and grpo["n_paired"] == 2
    # [44, 46]: mean 45, s = sqrt(2), t_{0.975,1} = 12.706204736 -> 45 -+ 12.706 = [32.3, 57.7]
    assert (grpo["weighted measured 95% low"], grpo["weighted measured 95% high"]) == (32.3, 57.7)
    est = _row(table, Q15, "standard", "est")
    assert est["weighted measured"] == 60.0
    assert est["weighted paper"] == 46.5  # reported only as a weighted average
    # two of four benchmarks measured: neither comparison is like for like
    assert math.isnan(est["delta paper"])
    assert math.isnan(est["delta grpo-n4"]) and pd.isna(est["n_paired"])


def test_intervals_over_three_seeds_by_hand() -> None:
    rows = []
    for seed, (grpo, seq) in enumerate(((0.40, 0.43), (0.42, 0.46), (0.44, 0.46))):
        rows += _eval_rows(Q15, "grpo-n4", seed, 100, _all(grpo), grpo)
        rows += _eval_rows(Q15, "seq-balance", seed, 100, _all(seq), seq)
    rows += _eval_rows(Q15, "seq-pos", 7, 100, _all(0.50), 0.50)  # a seed GRPO-n4 never trained: nothing to pair
    table = tables.weighted_average_table(pd.DataFrame(rows), measured_only=True)
    seq = _row(table, Q15, "standard", "seq-balance")
    # [43, 46, 46]: mean 45, s = sqrt(3), half width 4.302652730 * sqrt(3) / sqrt(3) = 4.3027 -> [40.7, 49.3]
    assert seq["n_seeds"] == 3 and seq["weighted measured"] == 45.0
    assert (seq["weighted measured 95% low"], seq["weighted measured 95% high"]) == (40.7, 49.3)
    # d = [3, 4, 2]: mean 3, s = 1, half width 4.302652730 / sqrt(3) = 2.4841 -> [0.5, 5.5]
    assert seq["delta grpo-n4"] == 3.0 and seq["n_paired"] == 3
    assert (seq["delta grpo-n4 95% low"], seq["delta grpo-n4 95% high"]) == (0.5, 5.5)
    pos = _row(table, Q15, "standard", "seq-pos")
    assert math.isnan(pos["delta grpo-n4"]) and pd.isna(pos["n_paired"]) and pos["n_seeds"] == 1
    markdown = tables.to_markdown(table)
    assert "weighted measured 95% CI" in markdown.splitlines()[0]
    assert "| 45.0 | [40.7, 49.3] | 47.6 | -2.6 | +3.0 | [0.5, 5.5] | 3 |" in markdown
    assert "| 50.0 | — | 46.1 | +3.9 | — | — | — |" in markdown
    csv = pd.read_csv(__import__("io").StringIO(tables.to_csv(table)), na_values=["—"])
    assert csv.loc[csv["method"] == "seq-balance", "delta grpo-n4 95% low"].item() == 0.5


def test_paper_only_rows_are_present_with_measured_missing_never_zero(eval_df) -> None:
    table = tables.weighted_average_table(eval_df)
    q7 = _row(table, "qwen2.5-math-7b", "standard", "grpo-n4")
    assert q7["weighted paper"] == 53.3
    assert q7["math500 paper"] == 82.2
    assert pd.isna(q7["n_seeds"])
    for column in ("weighted measured", "math500 measured", "delta paper", "delta grpo-n4"):
        assert math.isnan(q7[column]), column
    n8 = _row(table, Q15, "standard", "grpo-n8")  # weighted average only in the paper
    assert n8["weighted paper"] == 46.1
    assert math.isnan(n8["math500 paper"])
    assert len(table) == 18 + 4  # Table 1 rows + grpo-n8, grpo-n16, dapo, est of the summary
    markdown = tables.to_markdown(table)
    line = next(x for x in markdown.splitlines() if x.startswith("| qwen2.5-math-7b | standard | grpo-n4 |"))
    assert line == (
        "| qwen2.5-math-7b | standard | grpo-n4 | — | — | 82.2 | — | 44.7 | — | 45.6 | — | 23.2 | — | — | 53.3 | — | — "
        "| — | — |"
    )
    assert "| 0.0 | 82.2" not in markdown
    missing = tables.missing_measured(table)
    assert "qwen2.5-math-7b/standard/grpo-n4" in missing
    assert f"{Q15}/standard/seq-balance" not in missing


def test_prompt_set_filter_and_measured_only(eval_df) -> None:
    hard = tables.weighted_average_table(eval_df, prompt_set="hard")
    assert set(hard["prompt_set"]) == {"hard"}
    assert hard["weighted measured"].isna().all()
    mine = tables.weighted_average_table(eval_df, measured_only=True)
    assert list(mine["method"]) == ["grpo-n4", "seq-balance", "est"]


def test_tiny_runs_get_their_own_columns_and_no_paper_comparison() -> None:
    sizes = {"tiny-minerva": 54, "tiny-aime": 46}
    rows = []
    for method, v in (("grpo-n4", 0.30), ("est", 0.35)):
        # no weighted_average row: computed from the benchmarks, weighted by problems
        rows += _eval_rows("tiny-arith", method, 0, 4, {"tiny-minerva": v, "tiny-aime": v / 2}, None, sizes=sizes)
    table = tables.weighted_average_table(pd.DataFrame(rows))
    assert "tiny-minerva measured" in table.columns and "tiny-aime measured" in table.columns
    assert "math500 measured" not in table.columns and "math500 paper" in table.columns
    assert "tiny-minerva paper" not in table.columns
    est = _row(table, "tiny-arith", "standard", "est")
    assert est["tiny-minerva measured"] == 35.0
    assert est["weighted measured"] == pytest.approx(round(100 * (0.35 * 54 + 0.175 * 46) / 100, 1))
    assert math.isnan(est["weighted paper"]) and math.isnan(est["delta paper"])
    grpo = _row(table, "tiny-arith", "standard", "grpo-n4")
    assert grpo["weighted measured"] == pytest.approx(23.1)  # 100 * (0.30 * 54 + 0.15 * 46) / 100
    # paired at full precision, then rounded: 26.95 - 23.10 = 3.85 -> 3.8 or 3.9 (binary rounding)
    assert est["delta grpo-n4"] == pytest.approx(3.85, abs=0.051) and est["n_paired"] == 1
    assert table.iloc[-1]["backbone"] == "tiny-arith"  # catalog order: paper backbones first


def _model_rows(key: str, backbone: str, prompt_set: str, label: str, origin: str, weighted: float, values) -> list:
    rows = _eval_rows(backbone, label, 0, 0, values, weighted, prompt_set=prompt_set)
    return [{**row, "run": key, "origin": origin, "model": key} for row in rows]


def test_released_checkpoints_and_base_models_are_rows_of_their_own(eval_df) -> None:
    released = {"math500": 0.80, "minerva_math": 0.37, "olympiadbench": 0.42, "aime_like": 0.19}
    rows = eval_df.assign(origin="run", model=None).to_dict("records")
    rows += _model_rows(
        "qwen2.5-math-1.5b-balance-easy",
        Q15,
        "standard",
        "seq-balance (released checkpoint)",
        "released-checkpoint",
        0.50,
        released,
    )
    rows += _model_rows(
        "qwen2.5-math-1.5b-balance-hard",
        Q15,
        "hard",
        "seq-balance (released checkpoint)",
        "released-checkpoint",
        0.46,
        _all(0.46),
    )
    rows += _model_rows(Q15, Q15, "none", "base model", "base-model", 0.30, _all(0.30))
    table = tables.weighted_average_table(pd.DataFrame(rows))

    q15 = table[table["backbone"] == Q15]
    assert list(zip(q15["prompt_set"], q15["method"], strict=True))[:1] == [("none", "base model")]
    methods = q15[q15["prompt_set"] == "standard"]["method"].tolist()
    assert methods[methods.index("seq-balance") + 1] == "seq-balance (released checkpoint)"
    hard = q15[q15["prompt_set"] == "hard"]["method"].tolist()
    assert hard == ["grpo-n4", "seq-pos", "seq-balance", "seq-balance (released checkpoint)"]

    easy = _row(table, Q15, "standard", "seq-balance (released checkpoint)")
    assert easy["n_seeds"] == 1 and easy["math500 measured"] == 80.0 and easy["aime_like measured"] == 19.0
    assert (easy["math500 paper"], easy["minerva_math paper"], easy["aime_like paper"]) == (77.4, 36.5, 17.5)
    assert easy["weighted measured"] == 50.0 and easy["weighted paper"] == 47.6
    assert easy["delta paper"] == 2.4
    assert easy["delta grpo-n4"] == 5.0  # 50.0 - the trained GRPO-n4 mean 45.0
    trained = _row(table, Q15, "standard", "seq-balance")  # not averaged with the released checkpoint
    assert trained["n_seeds"] == 1 and trained["weighted measured"] == 48.0 and trained["delta paper"] == 0.4
    hard_row = _row(table, Q15, "hard", "seq-balance (released checkpoint)")
    assert hard_row["math500 paper"] == 74.7 and hard_row["weighted paper"] == 45.5
    assert hard_row["delta paper"] == 0.5 and math.isnan(hard_row["delta grpo-n4"])  # no trained hard GRPO-n4
    base = _row(table, Q15, "none", "base model")
    assert base["weighted measured"] == 30.0
    assert math.isnan(base["weighted paper"]) and math.isnan(base["delta paper"]) and math.isnan(base["math500 paper"])

    mine = tables.weighted_average_table(pd.DataFrame(rows), measured_only=True)
    assert mine["method"].tolist() == [
        "base model",
        "grpo-n4",
        "seq-balance",
        "seq-balance (released checkpoint)",
        "est",
        "seq-balance (released checkpoint)",
    ]
    assert _row(mine, Q15, "hard", "seq-balance (released checkpoint)")["weighted paper"] == 45.5
    assert (
        "| qwen2.5-math-1.5b | standard | seq-balance (released checkpoint) | 1 | 80.0 | 77.4 |"
        in tables.to_markdown(mine)
    )


def test_bad_inputs_are_user_errors(eval_df) -> None:
    with pytest.raises(ReproError, match="checkpoint must be 'final' or a step number"):
        tables.weighted_average_table(eval_df, checkpoint="last")
    with pytest.raises(ReproError, match=r"lacks column\(s\) ave_at_k; rerun `repro collect`"):
        tables.weighted_average_table(eval_df.drop(columns=["ave_at_k"]))


# ------------------------------------------------------------------------------ step time, sampling


def _training_rows(backbone: str, method: str, seed: int, per_step: list[dict], prompt_set: str = "standard") -> list:
    run = f"{backbone}__{method}__{prompt_set}__s{seed}"
    keys = {"run": run, "backbone": backbone, "method": method, "prompt_set": prompt_set, "seed": seed}
    return [{**keys, "step": i + 1, **metrics} for i, metrics in enumerate(per_step)]


@pytest.fixture
def training_df() -> pd.DataFrame:
    rows = []
    # step 1 is start-up and excluded: 10 s, then 1.0 s (GRPO-n4) against 2.0 s (Seq-balance)
    rows += _training_rows(Q15, "grpo-n4", 0, [{"timing_s/step": t} for t in (10.0, 1.0, 1.0, 1.0)])
    rows += _training_rows(Q15, "seq-balance", 0, [{"timing_s/step": t} for t in (30.0, 1.5, 2.5, 2.0)])
    rows += _training_rows(Q15, "seq-balance", 1, [{"timing_s/step": t} for t in (30.0, 2.0, 2.0, 2.0)])
    return pd.DataFrame(rows)


def test_step_time_relative_cost_beside_the_paper(training_df) -> None:
    table = tables.step_time_table(training_df)
    grpo = table[(table["backbone"] == Q15) & (table["method"] == "grpo-n4")].iloc[0]
    seq = table[(table["backbone"] == Q15) & (table["method"] == "seq-balance")].iloc[0]
    assert grpo["seconds measured"] == 1.0 and grpo["relative measured"] == 1.0
    assert seq["seconds measured"] == 2.0 and seq["n_runs"] == 2
    assert seq["relative measured"] == 2.0
    assert seq["relative paper"] == 2.8 and seq["seconds paper"] == 290
    est = table[(table["backbone"] == Q15) & (table["method"] == "est")].iloc[0]
    assert est["relative paper"] == 1.3 and math.isnan(est["seconds measured"])
    q7 = table[table["backbone"] == "qwen2.5-math-7b"]
    assert len(q7) == 3 and q7["seconds measured"].isna().all() and q7["relative measured"].isna().all()
    assert "qwen2.5-math-7b/seq-pos" in tables.missing_measured(table)
    markdown = tables.to_markdown(table)
    assert f"| {Q15} | seq-balance | 2 | 2.00 | 290 | 2.00 | 2.80 |" in markdown


def test_sampling_table_means_and_seq_only_unresolved() -> None:
    def step(total: float, signal: float, zero: float, extra: float, unresolved: float | None = None) -> dict:
        out = {
            "sampler/update_size": 32.0,  # every method trains on 4 responses for each of the 8 prompts
            "sampler/prompts": 8.0,
            "sampler/responses_total": total,
            "sampler/responses_per_prompt": total / 8,
            "sampler/signal_frac": signal,
            "sampler/zero_variance_frac": zero,
            "sampler/additional_samples": extra,
        }
        if unresolved is not None:
            out["sampler/unresolved"] = unresolved
        return out

    rows = _training_rows("tiny-arith", "grpo-n4", 0, [step(32, 0.5, 0.5, 0), step(32, 0.25, 0.75, 0)])
    rows += _training_rows("tiny-arith", "seq-balance", 0, [step(60, 1.0, 0.0, 28, 2), step(80, 0.75, 0.25, 48, 4)])
    rows += _training_rows("tiny-arith", "seq-balance", 1, [step(100, 1.0, 0.0, 68, 0), step(100, 1.0, 0.0, 68, 0)])
    rows += _training_rows("tiny-arith", "est", 0, [{"timing_s/step": 1.0}, {"timing_s/step": 1.0}])  # no sampler keys
    table = tables.sampling_table(pd.DataFrame(rows))
    grpo = _row(table, "tiny-arith", "standard", "grpo-n4")
    assert grpo["responses per step"] == 32.0 and grpo["responses per prompt"] == 4.0
    assert grpo["signal share %"] == 37.5 and grpo["zero-variance share %"] == 62.5
    assert math.isnan(grpo["unresolved share %"]) and grpo["additional samples per step"] == 0.0
    seq = _row(table, "tiny-arith", "standard", "seq-balance")
    assert seq["n_seeds"] == 2
    assert seq["responses per step"] == 85.0  # mean(70, 100)
    assert seq["responses per prompt"] == pytest.approx(10.62, abs=0.01)  # 85 / 8, two decimals
    assert seq["signal share %"] == pytest.approx(93.8, abs=0.05)  # mean(87.5, 100)
    assert seq["unresolved share %"] == pytest.approx(18.8, abs=0.05)  # mean((2/8 + 4/8) / 2, 0)
    assert seq["additional samples per step"] == 53.0
    assert seq["update responses per step"] == 32.0 and grpo["update responses per step"] == 32.0
    est = _row(table, "tiny-arith", "standard", "est")
    assert est[list(tables.SAMPLING_COLUMNS)].isna().all()
    assert tables.missing_measured(table) == ["tiny-arith/standard/est"]
    assert "| tiny-arith | standard | est | 1 | — | — | — | — | — | — | — |" in tables.to_markdown(table)


# ------------------------------------------------------------------------------ renderings


def test_renderings_carry_the_numbers_and_escape_latex(eval_df, tmp_path) -> None:
    table = tables.weighted_average_table(eval_df, measured_only=True)
    markdown = tables.to_markdown(table)
    lines = markdown.splitlines()
    assert lines[0].startswith("| backbone | prompt_set | method | n_seeds | math500 measured | math500 paper |")
    assert lines[1].startswith("| --- | --- | --- | ---: | ---: |")
    assert "| 48.0 | — | 47.6 | +0.4 | +4.0 | — | 1 |" in markdown
    assert "| 45.0 | [32.3, 57.7] | 45.3 | -0.3 | 0.0 | [0.0, 0.0] | 2 |" in markdown

    latex = tables.to_latex(table)
    assert latex.startswith("\\begin{tabular}{lllr")
    assert "\\toprule" in latex and "\\midrule" in latex and latex.rstrip().endswith("\\end{tabular}")
    assert "prompt\\_set" in latex and "minerva\\_math measured" in latex
    assert "prompt_set" not in latex.replace("prompt\\_set", "")
    assert "48.0 & -- & 47.6 & +0.4 & +4.0 & -- & 1 \\\\" in latex
    assert "[32.3, 57.7]" in latex and "weighted measured 95\\% CI" in latex
    assert "--" in latex and "—" not in latex
    assert tables.latex_escape("a_b 50% & #1 $x$") == "a\\_b 50\\% \\& \\#1 \\$x\\$"

    path = tmp_path / "out" / "table1.csv"
    text = tables.to_csv(table, path)
    assert path.read_text() == text
    back = pd.read_csv(path, na_values=["—"])
    seq = back[back["method"] == "seq-balance"].iloc[0]
    assert seq["weighted measured"] == 48.0 and seq["delta paper"] == 0.4
    grpo = back[back["method"] == "grpo-n4"].iloc[0]
    assert (grpo["weighted measured 95% low"], grpo["weighted measured 95% high"]) == (32.3, 57.7)
    est = back[back["method"] == "est"].iloc[0]
    assert math.isnan(est["delta paper"])
    assert ",—," in text

    from rich.console import Console

    console = Console(width=300, record=True)
    console.print(tables.to_rich(table, "Table 1"))
    shown = console.export_text()
    assert "+0.4" in shown and "47.6" in shown and "—" in shown and "[32.3, 57.7]" in shown


# ------------------------------------------------------------------------------ command line


@pytest.fixture
def repro_main(monkeypatch):
    """`repro table ...` through cli.main (the lead registers the sub-app; here a wrapper app does)."""
    wrapper = typer.Typer(no_args_is_help=True, rich_markup_mode="markdown")
    wrapper.add_typer(table_commands.app, name="table")
    monkeypatch.setattr(cli, "app", wrapper)
    return cli.main


def _write_results(folder: Path, eval_df: pd.DataFrame, training_df: pd.DataFrame) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    eval_df.to_parquet(folder / "eval.parquet")
    training_df.to_parquet(folder / "training.parquet")
    return folder


def test_cli_missing_results_is_one_line_and_exit_2(repro_main, tmp_path, capsys) -> None:
    missing = tmp_path / "nowhere"
    assert repro_main(["table", "weighted-average", "--results", str(missing)]) == 2
    err = capsys.readouterr().err
    assert err == f"error: no results in {missing}; run `repro collect` first\n"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert repro_main(["table", "step-time", "--results", str(empty)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: no results in {empty / 'training.parquet'}; run `repro collect` first"


def test_cli_renders_writes_and_says_what_is_missing(repro_main, eval_df, training_df, tmp_path, capsys) -> None:
    results = _write_results(tmp_path / "results", eval_df, training_df)
    assert repro_main(["table", "weighted-average", "--results", str(results), "--format", "markdown"]) == 0
    captured = capsys.readouterr()
    assert "| 48.0 | — | 47.6 | +0.4 | +4.0 | — | 1 |" in captured.out
    assert "no measured run" in captured.err and "qwen2.5-math-7b (all 6)" in captured.err
    assert len(captured.err.strip().splitlines()) == 1

    out = tmp_path / "gen" / "table1.tex"
    argv = ["table", "weighted-average", "--results", str(results), "--format", "latex", "--out", str(out)]
    assert repro_main([*argv, "--prompt-set", "standard"]) == 0
    assert "48.0 & -- & 47.6 & +0.4 & +4.0 & -- & 1" in out.read_text()
    assert capsys.readouterr().out == ""

    assert repro_main(["table", "step-time", "--results", str(results)]) == 0
    captured = capsys.readouterr()
    assert "2.80" in captured.out and "seq-balance" in captured.out
    assert "qwen2.5-math-7b (all 3)" in captured.err

    csv_out = tmp_path / "sampling.csv"
    assert repro_main(["table", "sampling", "--results", str(results), "--out", str(csv_out)]) == 0
    assert csv_out.read_text().startswith("backbone,prompt_set,method,n_seeds,responses per step")

    assert repro_main(["table", "sampling", "--results", str(results), "--out", str(tmp_path / "x.txt")]) == 2
    assert "cannot tell the format" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["weighted-average", "step-time", "sampling"])
def test_help_has_examples(repro_main, command, capsys) -> None:
    assert repro_main(["table", command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Examples" in out and f"repro table {command}" in out


def test_collected_tiny_runs(request, tmp_path) -> None:
    """End to end on real tiny-arith runs, once `repro collect` exists."""
    collect = pytest.importorskip("repro.report.collect").collect
    runs = request.getfixturevalue("tiny_runs")
    results = tmp_path / "results"
    collect(runs, results)
    table = tables.weighted_average_table(pd.read_parquet(results / "eval.parquet"), measured_only=True)
    assert list(table["method"]) == ["grpo-n4", "seq-balance", "est"]
    assert {"tiny-minerva measured", "tiny-aime measured"} <= set(table.columns)
    assert table["n_seeds"].tolist() == [1, 1, 1]
    assert table["weighted measured"].between(0, 100).all()
    assert table["delta grpo-n4"].iloc[0] == 0.0
    training = pd.read_parquet(results / "training.parquet")
    steps = tables.step_time_table(training, measured_only=True)
    assert (steps.loc[steps["method"] == "grpo-n4", "relative measured"] == 1.0).all()
    sampling = tables.sampling_table(training)
    assert sampling["responses per step"].notna().all()
