"""The docs cannot drift from the code: the generated pages equal what scripts/gen-docs.py writes now, a
hand edit is caught, and the README stays a short page that links only to pages that exist."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GEN = ROOT / "scripts" / "gen-docs.py"
GENERATED = ("reference.md", "methods.md", "fidelity.md", "troubleshooting.md")


def _check(docs: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(GEN), "--check", "--docs-dir", str(docs)], capture_output=True, text=True, cwd=ROOT
    )


def test_the_committed_generated_pages_are_what_the_code_generates():
    result = _check(ROOT / "docs")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_hand_edited_reference_fails_the_check_and_regenerating_fixes_it(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    reference = docs / "reference.md"
    reference.write_text(reference.read_text().replace("--steps", "--stepz", 1))
    result = _check(docs)
    assert result.returncode == 1
    assert result.stdout.strip() == "error: docs/reference.md differ from the code; run `python scripts/gen-docs.py`"
    subprocess.run([sys.executable, str(GEN), "--docs-dir", str(docs)], check=True, cwd=ROOT)
    assert _check(docs).returncode == 0
    assert reference.read_text() == (ROOT / "docs" / "reference.md").read_text()


def test_the_reference_lists_every_command_of_the_app():
    from typer.main import get_command

    from repro.cli import app

    def paths(group, prefix):
        for name, command in group.commands.items():
            yield f"{prefix} {name}"
            if hasattr(command, "commands"):
                yield from paths(command, f"{prefix} {name}")

    text = (ROOT / "docs" / "reference.md").read_text()
    missing = [path for path in paths(get_command(app), "repro") if f"`{path}`" not in text]
    assert not missing


def _gen_docs():
    """scripts/gen-docs.py as a module (its name is not an importable one)."""
    spec = importlib.util.spec_from_file_location("gen_docs", GEN)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_troubleshooting_page_holds_a_known_message():
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    assert "must be 64 hex digits" in text and text.count("- `error: ") > 100


def test_the_troubleshooting_page_opens_with_the_common_errors_and_their_fixes():
    text = (ROOT / "docs" / "troubleshooting.md").read_text()
    common, by_module = text.split("## Every `error:` line, by module")
    assert "## Common errors and their fixes" in common and "- `error: " not in common
    rows = [line for line in common.splitlines() if line.startswith("| `")]
    assert len(rows) == len(_gen_docs().COMMON_ERRORS) >= 12
    assert all(re.match(r"\| `+ ?error: ", row) for row in rows)
    assert "already finished; use --overwrite to run it again" in common
    assert "### `repro/rundir/create.py`" in by_module


def test_a_common_error_the_code_does_not_print_fails_the_generator(monkeypatch):
    gen = _gen_docs()
    module, line, fix = gen.COMMON_ERRORS[2]
    assert module == "repro/rundir/create.py" and "already finished" in line
    reworded = (module, line.replace("already finished", "is already done"), fix)
    monkeypatch.setattr(gen, "COMMON_ERRORS", (*gen.COMMON_ERRORS[:2], reworded, *gen.COMMON_ERRORS[3:]))
    with pytest.raises(SystemExit, match=r"is not a line repro/rundir/create\.py prints"):
        gen.troubleshooting()
    # a hole in the code's message takes any text, the words around it do not
    monkeypatch.setattr(gen, "COMMON_ERRORS", ((module, line.replace("runs/", "/scratch/"), fix),))
    assert "/scratch/tiny-arith" in gen.troubleshooting()


def test_a_hand_edited_common_error_fails_the_check(tmp_path, monkeypatch, capsys):
    gen = _gen_docs()
    monkeypatch.setattr(gen, "PAGES", {"troubleshooting.md": gen.troubleshooting})
    page = tmp_path / "troubleshooting.md"
    page.write_text(gen.troubleshooting().replace("--overwrite to run it again", "--force to run it again", 1))
    assert gen.main(["--check", "--docs-dir", str(tmp_path)]) == 1
    assert "docs/troubleshooting.md differ from the code" in capsys.readouterr().out
    assert gen.main(["--docs-dir", str(tmp_path)]) == 0 and gen.main(["--check", "--docs-dir", str(tmp_path)]) == 0


def test_the_readme_is_short_and_its_links_exist():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) < 8 * 1024
    assert "bash scripts/main.sh" in readme and "bash scripts/test.sh" in readme
    targets = [t.split("#")[0] for t in re.findall(r"\]\(([^)\s]+)\)", readme) if not t.startswith("http")]
    assert targets and all((ROOT / t).exists() for t in targets), targets


def test_every_docs_page_is_in_the_nav():
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    flat = re.findall(r"[\w-]+\.md", str(nav))
    assert sorted(flat) == sorted(p.name for p in (ROOT / "docs").glob("*.md"))
    assert set(GENERATED) <= set(flat)


def test_the_readmes_verdicts_are_the_reports_and_a_hand_edit_is_replaced(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_docs", GEN)
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    report = tmp_path / "REPORT.md"
    report.write_text(
        "- **Seq-balance vs GRPO-n4** (tiny-arith, standard): measured paired difference +0.5 points, 95% CI "
        "[-0.2, 1.1] over 3 seeds; the paper reports +2.3 points (47.6 vs 45.3). Verdict: **cannot tell**. "
        "Stability: the mean keeps its sign.\n"
        "- **Seq-balance vs GRPO-n4 on the hard prompt set** (tiny-arith, hard): measured paired difference +1.4 "
        "points, 95% CI [1.2, 1.6] over 3 seeds; the paper reports +3.6 points. Verdict: **agrees**. Stability: "
        "**firm**: the mean keeps its sign.\n"
    )
    lines = gen.verdict_summary(report)
    assert lines[1:3] == [
        "- Seq-balance vs GRPO-n4 (standard): +0.5 [-0.2, 1.1] n=3, the paper +2.3: **cannot tell**",
        "- Seq-balance vs GRPO-n4 on the hard prompt set (hard): +1.4 [1.2, 1.6] n=3, the paper +3.6: **agrees, firm**",
    ]
    assert lines[4].startswith("1 of 2 verdicts decided, 1 of them firm")
    readme = (ROOT / "README.md").read_text()
    assert gen.SUMMARY_START in readme and gen.with_summary(readme) == readme  # the committed README is current
    edited = readme.replace("**agrees", "**disagrees", 1) if "**agrees" in readme else readme + ""
    assert gen.with_summary(edited) == readme


def test_the_bench_sections_judged_readings_join_the_summary_and_unjudged_ones_do_not(tmp_path):
    """The lines repro.report.bench writes, parsed by gen-docs: the claim's head names the pair."""
    from test_bench_report import _by_seed, _points

    from repro.report import bench

    gen = _gen_docs()
    by_seed = _by_seed({"grpo-n4": [10.0, 11.0, 12.0], "pods-16-4": [12.0, 13.5, 14.0]})
    linear = [float(v) for v in range(1, 11)]
    points = _points({"grpo-n4": (100.0, linear), "pods-16-4": (400.0, linear)})
    lines = []
    for method in ("pods-16-4", "greso"):
        claim = next(c for c in bench.CLAIMS if c.method == method)
        lines += bench.claim_lines(by_seed, points, "tiny-arith", claim)[0]
    report = tmp_path / "REPORT.md"
    report.write_text("\n".join(lines) + "\n")
    summary = gen.verdict_summary(report)
    # pods: its token reading has no claim, so no line; greso vs dapo: no runs here, so no seed measured by both
    assert summary[1:2] == [
        "- pods-16-4 vs grpo-n4 (standard), per step: +2.2 [1.4, 2.9] n=3, its paper: better: **agrees, firm**"
    ]
    assert summary[3].startswith("1 of 1 verdicts decided, 1 of them firm")
    # a judged token reading and a no-loss reading, with their stability, as the bench writes them
    report.write_text(
        "- **greso vs dapo** (tiny-arith, standard). Claim: GRESO reports DAPO's accuracy (x: 1.5).\n"
        "  - Per step (final checkpoint, weighted Ave@k): +0.1 points, 95% CI [-0.5, 0.8] over 3 seeds; **agrees** "
        'against "no loss" (a loss under 1.0 point). Stability: **firm**: the mean stays above -1.0.\n'
        "  - At equal generated tokens (seed 0: 520k tokens, step 80 vs 100, seed 1: 525k tokens, step 80 vs 100): "
        "-1.4 points, 95% CI [-6.3, 3.5] over 3 seeds; **cannot tell** on the sign. Stability: the mean keeps.\n"
    )
    assert gen.verdict_summary(report)[1:3] == [
        '- greso vs dapo (standard), per step: +0.1 [-0.5, 0.8] n=3, its paper: "no loss": **agrees, firm**',
        "- greso vs dapo (standard), equal tokens: -1.4 [-6.3, 3.5] n=3, its paper: better: **cannot tell**",
    ]
