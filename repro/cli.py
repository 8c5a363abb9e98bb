"""The `repro` command line: wiring only; each command group lives in its own module of repro.commands."""

from __future__ import annotations

import logging
import sys

from repro import arithmetic

arithmetic.pin()  # before anything below imports numpy or torch: they read the pinned variables once, on load

import typer  # noqa: E402
from typer._click import exceptions as click_exc  # noqa: E402  (typer 0.29 raises its own copy of click's errors)

from repro.commands import catalog, collect, data, evaluate, plot, report, run, simulate, smoke, sweep, table  # noqa: E402
from repro.errors import ReproError  # noqa: E402

app = typer.Typer(
    name="repro",
    help=(
        "Reproduce Reinforce-Ada (arXiv 2510.04996): the paper's grid on GPUs, "
        "a miniature of it on a CPU.\n\n"
        "Examples:\n\n"
        "  repro run --model tiny-arith --method seq-balance   # train on this CPU in minutes\n\n"
        "  repro models                      # the backbones\n\n"
        "  repro methods seq-balance         # one method, every setting with its source\n\n"
        "  repro simulate sampling           # all methods against Bernoulli rewards at paper scale\n\n"
        "  repro simulate signal-loss --pass-at-1 0.265 --pass-at-k 0.813 --k 256"
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
app.command("run")(run.run)
app.command("eval")(evaluate.eval_cmd)
app.add_typer(data.app, name="data")
app.command("collect")(collect.collect)
app.add_typer(table.app, name="table")
app.add_typer(plot.app, name="plot")
app.command("report")(report.report)
app.add_typer(sweep.app, name="sweep")
app.command("status")(sweep.status)
app.command("cancel")(sweep.cancel)
app.command("models")(catalog.models)
app.command("methods")(catalog.methods)
app.add_typer(simulate.app, name="simulate")
app.command("smoke")(smoke.smoke)


def _quiet_verl_platform_probe() -> None:
    """verl's platform module warns, when a command imports verl, that this process has no accelerator ("No
    supported accelerator detected", "Platform 'nvidia' ... is registered but not available"): true of every
    command process, which only composes and checks configs, and printed before the command's own output or
    its one `error:` line. The filter outlives verl's own setLevel on import; the processes that train (the
    attempt's child, Ray's workers) are other interpreters and keep verl's warnings."""
    logging.getLogger("verl.plugin.platform.platform_manager").addFilter(lambda r: r.levelno > logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit code 2, never a traceback."""
    _quiet_verl_platform_probe()
    try:
        result = app(args=argv, prog_name="repro", standalone_mode=False)
    except ReproError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except click_exc.NoArgsIsHelpError:
        return 0
    except click_exc.ClickException as exc:
        hint = f" (see `{exc.ctx.command_path} --help`)" if getattr(exc, "ctx", None) else ""
        print(f"error: {exc.format_message()}{hint}", file=sys.stderr)
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
