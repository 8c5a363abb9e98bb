"""The command line as users meet it: help everywhere, one clear line and exit 2 for bad input."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from repro.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _commands() -> list[list[str]]:
    """Every visible command of the app, walked from Typer's own click tree (a new command is covered
    without editing this file)."""
    import typer

    from repro.cli import app

    found = []

    def walk(command, path: list[str]) -> None:
        found.append(path)
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            if not sub.hidden:
                walk(sub, [*path, name])

    walk(typer.main.get_command(app), [])
    return found


COMMANDS = _commands()
GROUPS = {tuple(c[:-1]) for c in COMMANDS if c}
# Outside backticks, the markdown help mode drops `<word>` as an HTML tag: "Default: <results>/REPORT.md"
# printed as "Default: /REPORT.md".
ANGLE_TAG = re.compile(r"<[A-Za-z][^<>]*>")


def test_the_walk_finds_the_commands_users_type():
    names = {" ".join(c) for c in COMMANDS}
    assert {"run", "eval", "sweep run", "sweep eval", "sweep retry-failed", "plot eval-curve", "data filter"} <= names
    assert len(COMMANDS) > 30


def _prose(text: str) -> str:
    return re.sub(r"`[^`]*`", "", text or "")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "repro")
def test_no_help_text_loses_an_angle_bracketed_word(command: list[str]) -> None:
    import typer

    from repro.cli import app

    node = typer.main.get_command(app)
    for name in command:
        node = node.commands[name]
    texts = [node.help or ""] + [getattr(p, "help", None) or "" for p in node.params]
    assert [t for t in texts if ANGLE_TAG.search(_prose(t))] == []


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "repro")
def test_every_command_has_help_with_examples(command: list[str], capsys) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    assert "Usage:" in out
    if command and tuple(command) not in GROUPS:
        assert "Example" in out or "repro " in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["models", "gpt-5"], "unknown backbone 'gpt-5'; valid backbones: generic, llama-3.2-3b-instruct"),
        (["methods", "ppo"], "unknown method 'ppo'; valid methods: dapo, est, est-released, greso, grpo-n16"),
        (["simulate", "sampling", "--methods", "grpo-n4,nope"], "unknown method 'nope'"),
        (["simulate", "sampling", "--pass-at-1", "1.5"], "--pass-at-1 must be strictly between 0 and 1"),
        (["simulate", "signal-loss", "--pass-at-1", "0.3", "--pass-at-k", "0.2"], "--pass-at-k must lie"),
        (["simulate", "signal-loss", "--alpha", "-1", "--beta", "2"], "--alpha and --beta must be positive"),
        (["simulate", "signal-loss", "--alpha", "1"], "--alpha and --beta go together"),
        (["simulate", "signal-loss", "--pass-rates", "/nonexistent/rates.txt"], "does not exist"),
        (["simulate", "signal-loss", "--show", "1,x"], "--show takes comma-separated integers"),
        (["simulate", "signal-loss", "--max-n", "8", "--show", "9"], "outside 1..8"),
        (["simulate", "sampling", "--steps", "0"], "Invalid value for '--steps'"),
        (["models", "--bogus"], "No such option: --bogus"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], fragment: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("error: ")
    assert fragment in err


def test_corrupt_pass_rate_file(tmp_path, capsys) -> None:
    path = tmp_path / "rates.json"
    path.write_text("{not json")
    assert main(["simulate", "sampling", "--pass-rates", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read pass rates") and err.count("\n") == 1


def test_top_level_cli_py_and_console_script_run() -> None:
    """`python cli.py` works from a checkout, the way the card promises."""
    proc = subprocess.run([sys.executable, "cli.py", "models", "nope"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: unknown backbone 'nope'")
    assert "Traceback" not in proc.stderr
    proc = subprocess.run([sys.executable, "cli.py", "methods"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0 and "seq-balance-stream" in proc.stdout
