"""Launchers: run every cell of a sweep file. Only `local` (subprocesses on this machine) exists so far."""

from repro.launch.local import CellOutcome, SweepReport, run_local

__all__ = ["CellOutcome", "SweepReport", "run_local"]
