"""`repro simulate`: Beta fitting, signal loss, and the per-method table against closed forms."""

from __future__ import annotations

import json

import numpy as np
import pytest

from repro.cli import main
from repro.errors import ReproError
from repro.simulate.pass_rates import beta_moment, fit_beta, from_file, pass_at_k_beta


def run_json(capsys, *argv: str) -> dict:
    code = main(list(argv))
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return json.loads(captured.out)


@pytest.mark.parametrize(("a", "b", "k"), [(0.26, 0.73, 256), (2.0, 5.0, 8), (0.1, 0.1, 64)])
def test_fit_beta_recovers_parameters(a: float, b: float, k: int) -> None:
    mean = a / (a + b)
    a_hat, b_hat = fit_beta(mean, float(pass_at_k_beta(a, b, k)), k)
    assert a_hat == pytest.approx(a, rel=1e-6)
    assert b_hat == pytest.approx(b, rel=1e-6)


def test_paper_fit_matches_both_statistics() -> None:
    a, b = fit_beta(0.265, 0.813, 256)
    assert a / (a + b) == pytest.approx(0.265, abs=1e-12)
    assert pass_at_k_beta(a, b, 256) == pytest.approx(0.813, abs=1e-9)
    # pass@k is monotone in k and starts at pass@1
    curve = pass_at_k_beta(a, b, np.arange(1, 257))
    assert curve[0] == pytest.approx(0.265) and np.all(np.diff(curve) > 0)


@pytest.mark.parametrize(
    ("p1", "pk", "k", "fragment"),
    [(0.0, 0.5, 8, "--pass-at-1"), (0.3, 0.2, 8, "--pass-at-k"), (0.3, 0.99, 2, "--pass-at-k"), (0.3, 0.5, 1, "--k")],
)
def test_impossible_fits_are_user_errors(p1: float, pk: float, k: int, fragment: str) -> None:
    with pytest.raises(ReproError, match=fragment):
        fit_beta(p1, pk, k)


def test_signal_loss_cli_prints_beta_moments(capsys) -> None:
    doc = run_json(
        capsys, "simulate", "signal-loss", "--pass-at-1", "0.265", "--pass-at-k", "0.813", "--k", "256", "--json"
    )
    rows = doc["rows"]
    assert [r["n"] for r in rows] == list(range(1, 257))
    a, b = doc["pass_rates"]["alpha"], doc["pass_rates"]["beta"]
    for r in rows:
        assert r["all_correct"] == pytest.approx(float(beta_moment(a, b, r["n"])), rel=1e-9)
        assert r["all_wrong"] == pytest.approx(float(beta_moment(b, a, r["n"])), rel=1e-9)
        assert r["signal"] == pytest.approx(1 - r["all_correct"] - r["all_wrong"])
    assert rows[0]["all_correct"] == pytest.approx(0.265)
    assert rows[255]["pass_at_n"] == pytest.approx(0.813, abs=1e-9)
    # Monte Carlo over 20000 prompts agrees within 4.5 sigma at every n
    for r in rows:
        for key in ("all_correct", "all_wrong"):
            exact, mc = r[key], r[f"mc_{key}"]
            assert abs(mc - exact) <= 4.5 * np.sqrt(exact * (1 - exact) / 20000) + 1e-3


def test_signal_loss_table_and_show(capsys) -> None:
    assert (
        main(["simulate", "signal-loss", "--alpha", "0.5", "--beta", "1.5", "--max-n", "16", "--show", "1,4,16"]) == 0
    )
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if ln.startswith("│")]
    assert [ln.split("│")[1].strip() for ln in lines] == ["1", "4", "16"]
    # E[p] for Beta(0.5, 1.5) is 0.25
    assert "0.2500" in lines[0]


def test_pass_rate_file_sources(tmp_path, capsys) -> None:
    txt = tmp_path / "rates.txt"
    txt.write_text("0.5\n0.25\n")
    doc = run_json(capsys, "simulate", "signal-loss", "--pass-rates", str(txt), "--max-n", "3", "--json")
    # exact values are plain averages over the two prompts
    assert doc["rows"][1]["all_correct"] == pytest.approx((0.25 + 0.0625) / 2)
    assert doc["rows"][2]["all_wrong"] == pytest.approx((0.125 + 0.421875) / 2)
    csv = tmp_path / "rates.csv"
    csv.write_text("prompt,pass_rate\na,0.1\nb,0.9\n")
    assert from_file(csv).values == (0.1, 0.9)
    bad = tmp_path / "bad.txt"
    bad.write_text("0.5\n1.7\n")
    with pytest.raises(ReproError, match=r"\[0, 1\]"):
        from_file(bad)


def test_sampling_json_agrees_with_closed_forms(capsys) -> None:
    doc = run_json(
        capsys,
        "simulate",
        "sampling",
        "--methods",
        "grpo-n4,seq-pos,seq-balance,dapo,est",
        "--steps",
        "40",
        "--batch",
        "256",
        "--dataset-size",
        "4096",
        "--json",
    )
    by = {m["method"]: m for m in doc["methods"]}
    assert set(by) == {"grpo-n4", "seq-pos", "seq-balance", "dapo", "est"}
    n_obs = 40 * 256
    for name in ("grpo-n4", "seq-pos", "seq-balance"):
        m = by[name]
        share = m["exact"]["signal_share"]
        assert m["signal_share"] == pytest.approx(share, abs=4.5 * np.sqrt(share * (1 - share) / n_obs))
    for name in ("seq-pos", "seq-balance"):
        m = by[name]
        assert m["draws_mean"] == pytest.approx(m["exact"]["draws_mean"], rel=0.03)
        assert m["unresolved_share"] == pytest.approx(m["exact"]["unresolved_share"], abs=0.02)
        assert m["draws_p95"] == m["exact"]["draws_p95"]
    assert by["grpo-n4"]["draws_mean"] == 4.0 and by["est"]["draws_mean"] == 8.0
    assert by["dapo"]["signal_share"] == 1.0
    assert by["dapo"]["draws_mean"] == pytest.approx(by["dapo"]["exact"]["draws_mean"], rel=0.1)
    # seq-balance spends more than seq-pos and recovers more signal than GRPO-n4 (the paper's point)
    assert by["seq-balance"]["draws_mean"] > by["seq-pos"]["draws_mean"] > 4.0
    assert by["seq-balance"]["signal_share"] > by["grpo-n4"]["signal_share"] + 0.15


def test_sampling_is_reproducible_from_seed(capsys) -> None:
    args = ["simulate", "sampling", "--methods", "seq-balance,est", "--steps", "5", "--batch", "64", "--json"]
    first = run_json(capsys, *args)
    second = run_json(capsys, *args)
    third = run_json(capsys, *args, "--seed", "1")
    strip = lambda d: [{k: v for k, v in m.items() if k != "seconds"} for m in d["methods"]]  # noqa: E731
    assert strip(first) == strip(second)
    assert strip(first) != strip(third)


def test_out_writes_the_full_json_document(tmp_path, capsys) -> None:
    target = tmp_path / "deep" / "signal.json"
    code = main(["simulate", "signal-loss", "--max-n", "8", "--show", "2", "--out", str(target)])
    assert code == 0
    table = capsys.readouterr().out
    doc = json.loads(target.read_text())
    assert [r["n"] for r in doc["rows"]] == list(range(1, 9))  # the file has every n, the table only n=2
    assert sum(1 for ln in table.splitlines() if ln.startswith("│")) == 1
    assert [p.name for p in target.parent.iterdir()] == ["signal.json"]  # no temp file left behind
