"""Rich consoles shared by every command, so output looks and wraps the same everywhere."""

from __future__ import annotations

import os

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def stdout_console(min_width: int = 120) -> Console:
    """Piped or captured output gets at least `min_width` columns so ids and tables are never cut."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = max(console.width, min_width)
    return console


def stderr_console() -> Console:
    """Progress bars and notes go to stderr, so stdout stays clean for tables and --json."""
    return Console(stderr=True)


def progress_bar(console: Console, *extra: ProgressColumn, transient: bool = True) -> Progress:
    """The one progress-bar layout of every long command: what, bar, done/total, extras, elapsed, left."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *extra,
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
    )
