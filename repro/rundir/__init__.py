"""One run = one folder; this module is the only code that reads or writes that folder's bookkeeping.

The CPU trainer and the verl launcher both write the same layout, so `collect`, tables and plots never
ask which path made a run (DESIGN.md, "The run directory is the contract")::

    <cell>/config.yaml                    resolved config (atomic write)
    <cell>/command.json                   {"argv": [...], "cwd": ...} of the command that created the run
    <cell>/status.json                    {"state", "created", "attempts": [...]}, rewritten atomically
    <cell>/metrics/attempt-001.jsonl      verl file-logger lines {"step": s, "data": {...}}, one file per
                                          attempt because verl opens its file with mode "wb"
    <cell>/metrics/attempt-001.sampler.jsonl  verl runs: the plugin's sampler metrics, same line format;
                                          readers merge them into the same attempt's step rows
    <cell>/checkpoints/global_step_<k>/   verl's naming, plus latest_checkpointed_iteration.txt
    <cell>/eval/                          evaluation results
    <cell>/run.lock                       flock held by the live attempt; its text is the holder's pid

Crash safety is the point: every file is either written atomically or appended one fsynced line at a
time, a run folder is created by renaming a complete sibling into place, and nothing is ever deleted

One module per concern, composed into `RunDir` (run.py): layout.py (paths, `cell_name`), create.py
(create / resume / refuse, with config_diff.py naming a config change), status.py (status.json,
config.yaml, `state`), lock.py (run.lock), attempts.py (begin / set / end an attempt), metrics.py and
metrics_writer.py (the metrics files, read and written), checkpoints.py. Import from `repro.rundir`.
"""

from __future__ import annotations

from repro.rundir.checkpoints import COMPLETE_MARKER, LATEST_FILE
from repro.rundir.layout import cell_name
from repro.rundir.metrics import SAMPLER_SUFFIX, MetricsRead, read_attempt, read_attempts, sampler_file
from repro.rundir.metrics_writer import MetricsWriter
from repro.rundir.run import RunDir
from repro.rundir.status import END_STATES, STATES

__all__ = [
    "COMPLETE_MARKER",
    "END_STATES",
    "LATEST_FILE",
    "SAMPLER_SUFFIX",
    "STATES",
    "MetricsRead",
    "MetricsWriter",
    "RunDir",
    "cell_name",
    "read_attempt",
    "read_attempts",
    "sampler_file",
]
