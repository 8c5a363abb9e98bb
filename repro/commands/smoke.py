"""`repro smoke`: every stage of a grid cell, small, on this machine, one PASS/FAIL line per stage."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from repro.console import stdout_console


def smoke(
    folder: Annotated[
        Path, typer.Option("--folder", help="Where the smoke's run, logs and results go (kept for reading).")
    ] = Path("runs/.smoke"),
    model: Annotated[
        str | None,
        typer.Option("--model", help="Backbone (default: qwen2.5-math-1.5b with CUDA, tiny-arith without)."),
    ] = None,
    model_path: Annotated[
        Path | None,
        typer.Option("--model-path", help="A local copy of the backbone's weights (a node without the Hub)."),
    ] = None,
) -> None:
    """Check this node before the grid: the stack, the cell's config, 2 training steps of Seq-balance through
    verl's real trainer, its checkpoint's weights, an evaluation of it and the table row, one line per stage.

    On a GPU node it trains Qwen2.5-Math-1.5B on every visible GPU with 16 prompts a step and 512-token
    responses (sized for about 15 minutes, not yet timed on a GPU; the model from the Hugging Face cache,
    else --model-path); on a CPU it runs the same stages on tiny-arith with `--engine verl` (a few minutes). The
    first FAIL line names what to fix; the stages after it are skipped. Exit code 0 when every stage passed.

    Examples:

      repro smoke                                   # this machine: GPU node or CPU rehearsal

      repro smoke --model-path /models/Qwen2.5-Math-1.5B --folder /scratch/smoke
    """
    from repro.smoke import Smoke

    console = stdout_console()
    check = Smoke(folder, model=model, model_path=model_path)
    console.print(
        f"smoke of {check.model} ({'GPU' if not check.cpu else 'CPU rehearsal'}) in {folder}", highlight=False
    )
    stages = check.run_all(lambda stage: console.print(stage.line(), highlight=False, soft_wrap=True))
    failed = [s for s in stages if s.ok is False]
    console.print(
        f"smoke: {len(stages) - len(failed)} of {len(stages)} stages passed"
        + (f"; fix {failed[0].name} first" if failed else ""),
        highlight=False,
    )
    if failed:
        raise typer.Exit(1)
