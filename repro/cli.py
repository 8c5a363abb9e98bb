"""The `repro` command line: wiring only; each command's work lives in its own module."""

from __future__ import annotations

import sys

import typer
from typer._click import exceptions as click_exc  # typer 0.29 raises its own copy of click's errors

from repro import (
    catalog_commands,
    collect_commands,
    data_commands,
    eval_commands,
    plot_commands,
    report_commands,
    run_commands,
    simulate_commands,
    sweep_commands,
    table_commands,
)
from repro.errors import ReproError

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
app.command("run")(run_commands.run)
app.command("eval")(eval_commands.eval_cmd)
app.add_typer(data_commands.app, name="data")
app.command("collect")(collect_commands.collect)
app.add_typer(table_commands.app, name="table")
app.add_typer(plot_commands.app, name="plot")
app.command("report")(report_commands.report)
app.add_typer(sweep_commands.app, name="sweep")
app.command("status")(sweep_commands.status)
app.command("cancel")(sweep_commands.cancel)
app.command("models")(catalog_commands.models)
app.command("methods")(catalog_commands.methods)
app.add_typer(simulate_commands.app, name="simulate")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors become one line on stderr and exit code 2, never a traceback."""
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
