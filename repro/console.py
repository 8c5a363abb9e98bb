"""Rich consoles shared by every command, so output looks and wraps the same everywhere."""

from __future__ import annotations

import os

from rich.console import Console


def stdout_console(min_width: int = 120) -> Console:
    """Piped or captured output gets at least `min_width` columns so ids and tables are never cut."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, min_width)
    return console


def stderr_console() -> Console:
    """Progress bars and notes go to stderr, so stdout stays clean for tables and --json."""
    return Console(stderr=True)
