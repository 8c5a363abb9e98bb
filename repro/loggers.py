"""The experiment loggers a run may use (`repro run --logger`, a sweep's `logger:`), one list for both engines.

Both engines log through verl's `Tracking`: verl cells name them in `trainer.logger`, the CPU trainer builds
a `Tracking` with the ones it does not do itself. `file` is always kept: it is the run folder's durable
metrics (metrics/attempt-NNN.jsonl), which `repro collect` reads. `console` is kept too, as today: on verl
it is verl's console printer, on the CPU trainer the progress bar already is the console. Imports nothing
of repro but its errors, so the command line, sweep files and the plan builder share it without a cycle.
"""

from __future__ import annotations

from collections.abc import Iterable

from repro.errors import ReproError

LOGGERS = ("console", "file", "tensorboard", "wandb")  # the order trainer.logger lists them in
ALWAYS = ("console", "file")  # today's behaviour: every run has them, whatever the option says
DEFAULT = ",".join(ALWAYS)
TENSORBOARD_ENV = "TENSORBOARD_DIR"  # read by verl's _TensorboardAdapter when Tracking is built
TENSORBOARD_FOLDER = "tensorboard"  # under the run folder


def parse_loggers(
    value: str | Iterable[str] | None, *, wandb: bool = False, where: str = "--logger"
) -> tuple[str, ...]:
    """A comma string or a list of names -> the canonical tuple (console and file always in, LOGGERS order).

    `wandb=True` is the old `--wandb` flag: it adds wandb. An unknown name is one ReproError line.
    """
    if value is None:
        items: list[str] = []
    elif isinstance(value, str):
        items = value.split(",")
    else:
        items = [str(v) for v in value]
    names = {item.strip().lower() for item in items if item.strip()}
    unknown = sorted(names - set(LOGGERS))
    if unknown:
        raise ReproError(
            f"{where}: unknown logger {', '.join(map(repr, unknown))}; valid loggers: {', '.join(LOGGERS)}"
        )
    names |= set(ALWAYS)
    if wandb:
        names.add("wandb")
    return tuple(name for name in LOGGERS if name in names)


def tracking_backends(loggers: Iterable[str]) -> list[str]:
    """The backends the CPU trainer hands to verl's Tracking: not file (its own MetricsWriter is the durable,
    append-only, fsynced file; verl's FileLogger opens with "wb" and would truncate it on a resume) and not
    console (the progress bar is the CPU run's console)."""
    return [name for name in loggers if name not in ALWAYS]


def as_option(loggers: Iterable[str]) -> str:
    """The `--logger` value that gives these loggers back."""
    return ",".join(loggers)
