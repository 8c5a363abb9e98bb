"""`repro models` and `repro methods`: the catalog printed as tables, each value beside its source.

The facts live in `repro.catalog`; this module only lays them out, so no number is restated here and a
table can never disagree with what a run actually uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import typer
from rich.table import Table
from rich.text import Text

from repro import catalog
from repro.catalog import Setting
from repro.console import stdout_console
from repro.errors import ReproError, unknown_name
from repro.sampling.settings import SETTINGS


def models(
    name: str | None = typer.Argument(
        None,
        metavar="NAME",
        help="A backbone key (e.g. qwen2.5-math-7b, tiny-arith) or a released checkpoint (key or Hub id). "
        "Omit it to list them all.",
        show_default=False,
    ),
) -> None:
    """List the backbones of the grid and the released checkpoints, or show every fact about one with its source.

    Examples:

      repro models                     # all backbones and released checkpoints, one line each

      repro models qwen2.5-math-1.5b   # every fact with its source

      repro models qwen2.5-math-1.5b-balance-easy   # a released checkpoint and its Table 1 row

      repro models tiny-arith          # the CPU miniature
    """
    console = stdout_console(min_width=140)  # piped output: Hub ids of released checkpoints are long
    if name is None:
        console.print(_backbones_table())
        console.print(_checkpoints_table())
        console.print("Show one with its sources: repro models NAME; evaluate one: repro eval NAME", style="dim")
        return
    released = {c.key: c for c in catalog.checkpoints().values()} | {c.hf_id: c for c in catalog.checkpoints().values()}
    if name in released:
        checkpoint = released[name]
        console.print(Text(f"{checkpoint.key} (released checkpoint)", style="bold"))
        console.print(Text(checkpoint.description))
        console.print(_settings_table(f"{checkpoint.key}: settings", checkpoint.settings))
        hint = f"Evaluate it: repro eval {checkpoint.key} (--model-path DIR for a local copy)"
        console.print(Text(hint, style="dim"))
        return
    if name not in catalog.backbones():
        unknown = unknown_name("backbone", name, catalog.backbones())
        raise ReproError(f"{unknown}; released checkpoints: {', '.join(catalog.checkpoints())}")
    backbone = catalog.get_backbone(name)
    console.print(Text(backbone.key, style="bold"))
    console.print(Text(backbone.description))
    console.print(_settings_table(f"{backbone.key}: settings", backbone.settings))


def methods(
    name: str | None = typer.Argument(
        None,
        metavar="NAME",
        help="A method key, e.g. seq-balance or grpo-n4. Omit it to list every method.",
        show_default=False,
    ),
    preset: str = typer.Option(
        "paper",
        "--preset",
        help="paper (default), or released: also every value `repro run --preset released` gives verl for this "
        "method, each with the released script and flag it comes from.",
    ),
) -> None:
    """List the methods of the grid, or show every sampler setting of one with its source.

    Examples:

      repro methods                    # all methods, one line each

      repro methods seq-balance        # every sampler setting with its source

      repro methods seq-balance --preset released   # and the released script's values, flag by flag

      repro methods seq-balance-stream # ours: no round barriers
    """
    from repro.cell import PRESETS
    from repro.errors import ReproError

    if preset not in PRESETS:
        raise ReproError(f"unknown preset {preset!r}; valid presets: {', '.join(PRESETS)}")
    console = stdout_console()
    if name is None:
        console.print(_methods_table())
        console.print(
            "paper: run in arXiv 2510.04996; released code: as the authors released it; literature: another paper's "
            "method on this sampling core; ours: beyond the paper. "
            "Show one with its sources: repro methods NAME",
            style="dim",
        )
        return
    method = catalog.get_method(name)
    origin = {
        "paper": "in the paper",
        "released code": "the authors' released code",
        "literature": f"from {method.literature}, on this sampling core",
    }.get(method.origin, "ours, beyond the paper")
    console.print(Text(f"{method.key} ({origin})", style="bold"))
    console.print(Text(method.summary))
    console.print(Text(f"Defined in: {method.source}", style="dim"))
    console.print(_settings_table(f"{method.key}: sampler settings", method.sampler))
    console.print(Text("Other SamplerSpec fields keep their defaults; this method does not read them.", style="dim"))
    console.print(Text(shared_hyperparameters_line()))
    if preset == "released":
        for part in _released_tables(method.kind):
            console.print(part)
    else:
        hint = f"The released scripts' values with their sources: repro methods {method.key} --preset released"
        console.print(Text(hint, style="dim"))


def shared_hyperparameters_line() -> str:
    """One line summing up what every method shares, so a method's page is complete on its own."""
    settings = catalog.hyperparameters()
    h = {key: setting.value for key, setting in settings.items()}
    kl = "no KL" if not (h["use_kl_in_reward"] or h["use_kl_loss"]) else "KL on"
    return (
        f"Shared by all methods: {h['policy_loss']} (clip {h['clip_ratio_low']}/{h['clip_ratio_high']}), "
        f"{h['loss_agg_mode']}, {kl}, entropy {h['entropy_coeff']}"
        f"{_released(settings['entropy_coeff'])}; {h['optimizer']} lr {h['lr']} {h['lr_schedule']}, "
        f"{h['lr_warmup_steps']} warm-up steps; {h['train_prompt_batch_size']} prompts per step, "
        f"mini-batch {h['ppo_mini_batch_size']}, {h['total_training_steps']} steps"
        f"{_released(settings['total_training_steps'])}; temperature {h['temperature']}, "
        f"top-p {h['top_p']}, response <= {h['max_response_length']} tokens. "
        "Every value with its source: repro/catalog/hyperparameters.yaml."
    )


def _released(setting: Setting) -> str:
    return "" if setting.released is None else f" (released: {_fmt(setting.released)})"


def _backbones_table() -> Table:
    table = Table(title="Backbones")
    table.add_column("key", no_wrap=True, style="bold")
    table.add_column("HF id", overflow="fold")
    table.add_column("params")
    table.add_column("device")
    table.add_column("prompt set")
    for backbone in catalog.backbones().values():
        table.add_row(
            Text(backbone.key),
            Text(
                _fmt(backbone.hf_id)
                if backbone.hf_id
                else "(your --model-path)"
                if backbone.weights_from_user
                else "(built locally)"
            ),
            Text(backbone.params),
            Text(backbone.device),
            Text(backbone.prompt_set),
        )
    return table


def _checkpoints_table() -> Table:
    table = Table(title="Released checkpoints")
    table.add_column("key", no_wrap=True, style="bold")
    table.add_column("Hub id", overflow="fold")
    table.add_column("Table 1 row", overflow="fold")
    for checkpoint in catalog.checkpoints().values():
        row = checkpoint.table1_row
        table.add_row(
            Text(checkpoint.key),
            Text(checkpoint.hf_id),
            Text(f"{row['backbone']}/{row['prompt_set']}/{row['method']}"),
        )
    return table


def _methods_table() -> Table:
    table = Table(title="Methods")
    table.add_column("key", no_wrap=True, style="bold")
    table.add_column("kind")
    table.add_column("n")
    table.add_column("key knobs")
    table.add_column("origin")
    for method in catalog.methods().values():
        spec = method.sampler_spec()
        settings = SETTINGS[spec.kind].of(spec)
        table.add_row(
            Text(method.key),
            Text(spec.kind),
            Text(settings.group()),
            Text(settings.knobs()),
            Text(method.origin),
        )
    return table


def _released_tables(kind: str) -> list[Table | Text]:
    """What `--preset released` passes to verl for a method kind, and what of the script it does not pass:
    both straight from released_preset.yaml, so this page and the dry run cannot disagree."""
    script = catalog.released_script(kind)
    if script is None:
        return [
            Text(
                f"No released script trained {kind} methods: --preset released keeps the paper values, with the "
                "released values of hyperparameters.yaml (entropy_coeff, total_training_steps) and of the "
                "sampler settings above."
            )
        ]
    parts: list[Table | Text] = [Text(f"Released preset: {script.script} of {script.repository}", style="bold")]
    parts.append(Text(f"Trainer: {script.trainer}", style="dim"))
    sections = (
        ("every GPU backbone", script.overrides),
        (f"{script.backbone} only (sized for its node; other backbones keep gpu_resources.yaml)", script.resources),
    )
    for scope, settings in sections:
        table = Table(title=f"{kind}: released values passed to verl 0.9.1, {scope}", show_lines=True)
        table.add_column("verl key", overflow="fold", style="bold")
        table.add_column("value", overflow="fold")
        table.add_column("source", overflow="fold")
        for key, setting in settings.items():
            source = setting.source + (f"\nnote: {setting.note}" if setting.note else "")
            value = "(removed)" if setting.value is None else _fmt(setting.value)
            table.add_row(Text(key), Text(value), Text(source))
        parts.append(table)
    table = Table(title=f"{kind}: released values verl 0.9.1 does not get, and why", show_lines=True)
    table.add_column("script setting", overflow="fold", style="bold")
    table.add_column("value", overflow="fold")
    table.add_column("source and reason", overflow="fold")
    for key, setting in script.not_passed.items():
        table.add_row(Text(key), Text(_fmt(setting.value)), Text(f"{setting.source}\nwhy: {setting.note}"))
    parts.append(table)
    return parts


def _settings_table(title: str, settings: Mapping[str, Setting]) -> Table:
    table = Table(title=title, show_lines=True)
    table.add_column("setting", no_wrap=True, style="bold")
    table.add_column("value", overflow="fold")
    table.add_column("source", overflow="fold")
    for key, setting in settings.items():
        source = setting.source
        if setting.released is not None:
            source += f"\nreleased code: {_fmt(setting.released)}"
        if setting.note:
            source += f"\nnote: {setting.note}"
        table.add_row(Text(key), Text(_fmt(setting.value)), Text(source))
    return table


def _fmt(value: Any) -> str:
    """YAML-like spelling, so what the table shows is what a user would write in a config."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_fmt(item) for item in value) if value else "(none)"
    if isinstance(value, Mapping):
        return ", ".join(f"{key}: {_fmt(item)}" for key, item in value.items()) if value else "(none)"
    return str(value)
