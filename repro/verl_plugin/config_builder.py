"""One grid cell -> the complete verl 0.9.1 Hydra override list, and the command that runs it.

Everything comes from the catalog (paper hyperparameters, the method's sampler knobs, per-backbone GPU
resources, and under the `released` preset the released script of the method's kind, released_preset.yaml),
so a cell's config is reproducible from its name and preset. The overrides compose against
verl's installed `ppo_trainer` config, where an unknown key is an error, and pass verl's own
`validate_config`; `compose_and_validate` runs both on a CPU.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from repro import catalog
from repro.cell import ResolvedCell
from repro.errors import ReproError
from repro.launch.allocation_end import BARRIER_FLOOR_S, DIST_TIMEOUT_ENV
from repro.launch.attention import VERL_ENTRY_MODULE
from repro.loggers import TENSORBOARD_ENV, TENSORBOARD_FOLDER, parse_loggers
from repro.rundir.retention import KEPT_ENV
from repro.sampling.policies import policy_for
from repro.sampling.settings import SETTINGS, UniformSettings

ADV_ESTIMATOR = "reinforce_ada"
MANAGER_CLASS = "repro.verl_plugin.rollout.ReinforceAdaAgentLoopManager"
CHECKPOINT_CALLBACK = "repro.verl_plugin.checkpoint.AdaStateCheckpoint"
# verl's sync trainer that stops at a step boundary when the allocation is ending (repro.verl_plugin.stop_trainer,
# registered under this name by the plugin module every Ray process imports)
TRAINER_MODE = "repro_sync"
PLUGIN_MODULE = "repro.verl_plugin.register"
ENV_VARS_KEY = "ray_init.runtime_env.env_vars."
CPU_MODULE = "repro.verl_plugin.cpu"  # loaded only for CPU cells
ENTRY_MODULE = VERL_ENTRY_MODULE  # named below the plugin: the launchers look for it in a trainer command


@dataclass
class VerlCell:
    """A resolved cell with what its run on this machine adds: the data files, the run folder, the weights
    verl loads, the loggers, the user's overrides and the environment of verl's Ray workers."""

    cell: ResolvedCell
    train_file: str = ""
    val_file: str = ""
    run_dir: Path = Path("runs")
    metrics_file: str = ""
    wandb: bool = False  # the old --wandb flag: adds wandb to `loggers`
    overrides: dict[str, Any] = field(default_factory=dict)
    model_path: str = ""  # a CPU backbone's local model folder, or the user's `--model-path` (else the Hub id)
    loggers: tuple[str, ...] = ()  # repro.loggers names; console and file are always in trainer.logger
    env: dict[str, str] = field(default_factory=dict)  # for verl's Ray workers: a GPU cell's offline Hub cache

    @property
    def name(self) -> str:
        return self.cell.name


# A string Hydra's override grammar reads back as this very string when unquoted: a letter, '_' or '/'
# first (not '.' or a digit: `.5`, `1e-3` are numbers), then only its plain unquoted characters.
_PLAIN_STRING = re.compile(r"[A-Za-z_/][A-Za-z0-9_\-+./:@%*?|]*")
_HYDRA_WORDS = {"true", "false", "null", "nan", "inf"}  # case-insensitive keywords of the grammar


def _quote(text: str) -> str:
    """A single-quoted Hydra string: quotes escaped, and backslashes doubled where they precede a quote
    (including the closing one); Hydra reads every other backslash literally."""
    body = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    body = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, body)
    return f"'{body}'"


def _fmt(value: Any) -> str:
    """One override value as Hydra parses it back exactly (a comma, space, quote, bracket or a string that
    looks like a number/bool/null is quoted: unquoted, `a,b` is Hydra's "Ambiguous value")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return "[" + ",".join(_fmt(v) for v in value) + "]"
    if isinstance(value, str):
        if _PLAIN_STRING.fullmatch(value) and value.lower() not in _HYDRA_WORDS:
            return value
        return _quote(value)
    return str(value)


ROLLOUT_SEED_BASE = 42  # verl's default rollout.seed: seed 0 keeps it
ROLLOUT_SEED_STRIDE = 1000  # verl seeds replica r with rollout.seed + r; cells of different seeds never share one


def rollout_seed(seed: int) -> int:
    """`rollout.seed` of a cell: verl's default 42 made distinct per RL seed, so seeds s0/s1/s2 sample
    differently, not only in data order (verl's vLLM server seeds each engine `rollout.seed + replica_rank`)."""
    return ROLLOUT_SEED_BASE + ROLLOUT_SEED_STRIDE * int(seed)


MAX_MODEL_LEN_KEY = "actor_rollout_ref.rollout.max_model_len"


def rollout_n(spec) -> int:
    """Responses per prompt in verl's update batch: the group size, Est's average budget."""
    return spec.n_avg if spec.kind == "est" else spec.n


def count_prompts(train_files: str | list[str]) -> int | None:
    """Prompts in verl's training set (Parquet metadata, no rows read); None while a file does not exist yet."""
    files = [train_files] if isinstance(train_files, str) else list(train_files)
    if not files or not all(f and os.path.isfile(f) for f in files):
        return None
    import pyarrow.parquet as pq

    total = 0
    for f in files:
        try:
            total += pq.ParquetFile(f).metadata.num_rows
        except Exception as exc:
            raise ReproError(
                f"cannot read {f} as Parquet ({type(exc).__name__}); rebuild it with `repro data filter`"
            ) from None
    return total


def generous_epochs(total_steps: int) -> int:
    """Epochs that reach `total_steps` from any training set of at least one batch (one step per epoch)."""
    return max(1, int(total_steps))


def training_epochs(train_files: str | list[str], batch: int, total_steps: int | None) -> int | None:
    """`trainer.total_epochs` for a run of `total_steps`: verl stops at the first of total_epochs x
    steps_per_epoch and total_training_steps, with steps_per_epoch = prompts // train_batch_size (its
    dataloader drops the last partial batch; verl/trainer/ppo/v1/trainer_base.py), so the fewest epochs that
    reach every step is ceil(total_steps / steps_per_epoch). A set smaller than one batch is an error (verl
    would divide by zero); a set not built yet gets `generous_epochs`, which the dry run's preflight says."""
    n = count_prompts(train_files)
    if n is None:
        return None if total_steps is None else generous_epochs(total_steps)
    steps_per_epoch = n // int(batch)
    if steps_per_epoch == 0:
        shown = train_files if isinstance(train_files, str) else ", ".join(train_files)
        raise ReproError(
            f"the training set {shown} has {n} prompts, fewer than one batch of {batch} (verl would divide by "
            f"zero); build a larger set with `repro data filter` or pass --set data.train_batch_size=<at most {n}>"
        )
    return None if total_steps is None else math.ceil(int(total_steps) / steps_per_epoch)


def _spec_items(spec) -> dict[str, Any]:
    """The sampler settings a cell hands the plugin's manager (`algorithm.reinforce_ada`): the paper's families
    as they always have, every stored field but GRPO's that their kind does not read (norm_adv_by_std, the
    uniform/dapo group-std switch: Seq/Est's estimator divides by a std only under global_std_norm, the
    ablation), so a resolved config shows no such knob that does nothing; the literature's families their own
    fields only (the manager rebuilds the rest as the spec's defaults, which they do not read). What a kind
    reads is its typed settings' `spec_fields`."""
    values = spec.to_dict()
    settings = SETTINGS[spec.kind]
    read = {"kind", "seed", *settings.spec_fields().values()}
    if settings.prefix:
        return {key: value for key, value in values.items() if key in read}
    unread = set(UniformSettings.spec_fields().values()) - read
    return {key: value for key, value in values.items() if key not in unread}


def released_report(cell: ResolvedCell, overrides: list[str]) -> list[str]:
    """The dry run's account of the released preset: every value it passed with its source (marked where a
    --set replaced it), then every released value verl 0.9.1 does not get, with the reason."""
    if cell.is_cpu:
        return ["released preset: not applied to a CPU backbone (its rehearsal keeps the CPU scaling)"]
    script = cell.released
    if script is None:
        return [
            f"released preset: no released script trained {cell.method.kind} methods; the paper preset applies, "
            "with the hyperparameters' released values (entropy_coeff, total_training_steps)"
        ]
    lines = [f"released preset: {script.script} of {script.repository}; each value <- its source"]
    lines += _setting_lines(cell.released_settings(), overrides)
    lines.append(f"released values verl 0.9.1 does not get ({script.script}):")
    for key, setting in script.not_passed.items():
        lines.append(f"  {key}={_fmt(setting.value)}: {setting.note}")
    return lines


def async_report(cell: ResolvedCell, overrides: list[str]) -> list[str]:
    """The dry run's account of an async cell: every verl setting the async schedule adds, with its reason
    (marked where a --set replaced it)."""
    if not cell.schedule:
        return []
    lines = ["async schedule (repro/catalog/async_schedule.yaml); each value <- its reason"]
    return lines + _setting_lines(cell.schedule, overrides)


def _setting_lines(settings: Mapping[str, catalog.Setting], overrides: list[str]) -> list[str]:
    """One dry-run line per setting a preset or schedule passes to verl, with its source, marked where a --set
    replaced it (a null value is a removed key)."""
    given = set(overrides)
    lines = []
    for key, setting in settings.items():
        if setting.value is None:
            shown = f"{key} removed"
            passed = not any(o.split("=", 1)[0].lstrip("+") == key.lstrip("+") for o in overrides)
        else:
            shown = f"{key}={_fmt(setting.value)}"
            passed = shown in given
        lines.append(f"  {shown}  <- {setting.source}{'' if passed else '  [replaced by --set]'}")
    return lines


def _put(o: dict[str, Any], key: str, value: Any, keep_null: bool = False) -> None:
    """Set `key`, replacing the entry for the same verl key whether or not either spells Hydra's `+` prefix
    (the existing spelling is kept: verl's struct config needs `+` exactly for keys it lacks). A released
    null removes the entry (the script left the default); a user's null is passed on to verl."""
    plain = key.lstrip("+")
    matches = [k for k in o if k.lstrip("+") == plain]
    for k in matches:
        del o[k]
    if value is not None or keep_null:
        o[matches[0] if matches else key] = value


def build_overrides(verl_cell: VerlCell) -> list[str]:
    cell = verl_cell.cell
    backbone, cpu, spec = cell.backbone, cell.is_cpu, cell.sampler
    res = {k: v.value for k, v in cell.resources.items()}
    loggers = parse_loggers(verl_cell.loggers, wandb=verl_cell.wandb)
    hp = cell.hp
    o: dict[str, Any] = {
        "data.train_files": verl_cell.train_file,
        "data.val_files": verl_cell.val_file,
        "data.train_batch_size": hp("train_prompt_batch_size"),
        "data.max_prompt_length": hp("max_prompt_length"),
        "data.max_response_length": hp("max_response_length"),
        "data.seed": cell.seed,
        "actor_rollout_ref.model.path": verl_cell.model_path or backbone.hf_id,
        "actor_rollout_ref.actor.ppo_mini_batch_size": hp("ppo_mini_batch_size"),
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": res["actor.ppo_max_token_len_per_gpu"],
        "actor_rollout_ref.actor.optim.lr": hp("lr"),
        "actor_rollout_ref.actor.optim.lr_warmup_steps": hp("lr_warmup_steps"),
        "actor_rollout_ref.actor.optim.lr_scheduler_type": hp("lr_schedule"),
        "actor_rollout_ref.actor.optim.weight_decay": hp("weight_decay"),
        "actor_rollout_ref.actor.optim.clip_grad": hp("grad_clip"),
        "actor_rollout_ref.actor.clip_ratio_low": hp("clip_ratio_low"),
        "actor_rollout_ref.actor.clip_ratio_high": hp("clip_ratio_high"),
        "actor_rollout_ref.actor.loss_agg_mode": hp("loss_agg_mode"),
        "actor_rollout_ref.actor.entropy_coeff": hp("entropy_coeff"),
        "actor_rollout_ref.actor.use_kl_loss": hp("use_kl_loss"),
        # every cell, GPU or CPU, on the engine the CPU rehearsal runs (catalog: fsdp_strategy)
        "actor_rollout_ref.actor.strategy": hp("fsdp_strategy"),
        "actor_rollout_ref.ref.strategy": hp("fsdp_strategy"),
        "actor_rollout_ref.actor.fsdp_config.param_offload": res["actor.fsdp_config.param_offload"],
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload": res["actor.fsdp_config.optimizer_offload"],
        "actor_rollout_ref.rollout.name": "vllm",
        "actor_rollout_ref.rollout.n": rollout_n(spec),
        "actor_rollout_ref.rollout.temperature": hp("temperature"),
        "actor_rollout_ref.rollout.top_p": hp("top_p"),
        "actor_rollout_ref.rollout.tensor_model_parallel_size": res["rollout.tensor_model_parallel_size"],
        "actor_rollout_ref.rollout.gpu_memory_utilization": res["rollout.gpu_memory_utilization"],
        "actor_rollout_ref.rollout.seed": rollout_seed(cell.seed),
        MAX_MODEL_LEN_KEY: None,  # prompt + response, once the user's overrides are in (below)
        "algorithm.use_kl_in_reward": hp("use_kl_in_reward"),
        "reward.custom_reward_function.path": "pkg://repro.reward",
        "reward.custom_reward_function.name": "compute_score",
        "trainer.nnodes": res["nnodes"],
        "trainer.n_gpus_per_node": res["n_gpus_per_node"],
        "trainer.total_training_steps": hp("total_training_steps"),
        "trainer.total_epochs": None,  # from the training-set size, once the user's overrides are in (below)
        "trainer.save_freq": hp("eval_every_steps"),
        # verl keeps every save (null); the plugin keeps the newest K whole, across allocations, and slims
        # the older ones to their bf16 Hugging Face weights (repro.rundir.retention)
        "trainer.max_actor_ckpt_to_keep": None,
        "trainer.max_critic_ckpt_to_keep": None,
        f"+ray_kwargs.{ENV_VARS_KEY}{KEPT_ENV}": hp("checkpoints_kept"),
        "actor_rollout_ref.actor.checkpoint.save_contents": hp("checkpoint_save_contents"),
        "trainer.test_freq": -1,
        "trainer.val_before_train": False,
        "trainer.logger": list(loggers),
        "trainer.project_name": "repro",
        "trainer.experiment_name": cell.name,
        # absolute: a cluster job (and verl's Ray workers) may start in another directory
        "trainer.default_local_dir": os.path.abspath(Path(verl_cell.run_dir) / "checkpoints"),
        "trainer.resume_mode": "auto",
        "trainer.v1.trainer_mode": TRAINER_MODE,
        "trainer.checkpoint_callback_class": CHECKPOINT_CALLBACK,
        # every Ray process imports the plugin (estimator registration) before verl runs
        "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES": PLUGIN_MODULE,
    }
    if verl_cell.metrics_file:
        o["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH"] = os.path.abspath(verl_cell.metrics_file)
    if "tensorboard" in loggers:  # verl's _TensorboardAdapter reads it in the trainer process
        tensorboard = os.path.abspath(Path(verl_cell.run_dir) / TENSORBOARD_FOLDER)
        o[f"+ray_kwargs.{ENV_VARS_KEY}{TENSORBOARD_ENV}"] = tensorboard
    for name, value in verl_cell.env.items():  # every Ray worker reads the weights offline (repro.weights_cache)
        o[f"+ray_kwargs.{ENV_VARS_KEY}{name}"] = value
    max_pos = res.get("model.override_config.max_position_embeddings")
    if max_pos:
        o["+actor_rollout_ref.model.override_config.max_position_embeddings"] = max_pos
    policy = policy_for(spec)
    if spec.early_exit != "off" and cell.schedule:
        raise ReproError(
            f"the early exit ({cell.method.key}) runs on verl's synchronous trainer: its async client resumes "
            "every aborted request (partial rollouts), the exit's cancellations included; drop --async"
        )
    if spec.early_exit != "off" and not cpu:
        raise ReproError(
            f"the early exit ({cell.method.key}) cancels single requests, and verl 0.9.1's vLLM server cannot: its "
            "abort_request looks up the caller's id, which vLLM >= 0.16 keys by an internal one (the CPU "
            "rehearsal's server aborts by vLLM's external id, repro.verl_plugin.cpu_vllm); use seq-balance"
        )
    if policy.verl_advantage == "grpo":
        o["algorithm.adv_estimator"] = "grpo"
        o["algorithm.norm_adv_by_std_in_grpo"] = spec.norm_adv_by_std
    if policy.refills:  # DAPO, GRESO
        # DAPO's refills run in the plugin's manager, through the sampling core as on the CPU path
        # (bounded by max_num_gen_batches, dapo/* metrics); verl 0.9.1's v1 replay buffer would ignore the
        # cap and refill without bound, so its own group filter stays off and does not filter a second time.
        # The advantage is verl's grpo over each kept group of n (repro.verl_plugin.rollout, "DAPO").
        o["algorithm.filter_groups.enable"] = False
        o["+actor_rollout_ref.rollout.agent.agent_loop_manager_class"] = MANAGER_CLASS
        for key, value in _spec_items(spec).items():
            o[f"+algorithm.reinforce_ada.{key}"] = value
    elif policy.verl_advantage == ADV_ESTIMATOR:  # Seq, Est, PODS, Knapsack RL
        o["algorithm.adv_estimator"] = ADV_ESTIMATOR
        o["+actor_rollout_ref.rollout.agent.agent_loop_manager_class"] = MANAGER_CLASS
        for key, value in _spec_items(spec).items():
            o[f"+algorithm.reinforce_ada.{key}"] = value
    for key, setting in cell.released_settings().items():  # the released script's values replace the paper's
        _put(o, key, setting.value)
    if cpu:  # after the shared part, before the user's own overrides
        o["+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES"] = f"{PLUGIN_MODULE},{CPU_MODULE}"
        for key, setting in cell.device_overrides.items():
            o[key] = setting.value
    for key, setting in cell.schedule.items():  # METHOD-async: verl's colocate_async trainer, staleness bounded
        _put(o, key, setting.value)
    for key, value in verl_cell.overrides.items():
        _put(o, key, value, keep_null=True)
    # An explicit context for vLLM: left null, verl's server would take max_position_embeddings after
    # model.override_config (32768 for Qwen2.5-Math under the released override), which vLLM refuses above
    # the checkpoint's own 4096. prompt + response is what the released (older) verl passed too.
    if o.get(MAX_MODEL_LEN_KEY) is None and not any(k.lstrip("+") == MAX_MODEL_LEN_KEY for k in verl_cell.overrides):
        lengths = (o["data.max_prompt_length"], o["data.max_response_length"])
        if all(isinstance(v, int) and not isinstance(v, bool) for v in lengths):
            o[MAX_MODEL_LEN_KEY] = sum(lengths)
    for key in ("data.train_batch_size", "trainer.total_training_steps"):
        if not isinstance(o[key], int | None) or isinstance(o[key], bool):
            raise ReproError(f"{key} must be an integer, got {o[key]!r}; fix the --set or the sweep's overrides")
    # also checks that the set holds one batch when the released preset's fixed 1000 epochs are used
    epochs = training_epochs(o["data.train_files"], o["data.train_batch_size"], o["trainer.total_training_steps"])
    if o.get("trainer.total_epochs") is None:  # neither the user's nor the released script's value
        o["trainer.total_epochs"] = epochs
        if epochs is None:  # total_training_steps=null: verl trains by its own epoch count
            del o["trainer.total_epochs"]
    # the FSDP workers' process group waits this long at the save's barrier (repro.verl_plugin.dist_timeout)
    timeout_key = f"+ray_kwargs.{ENV_VARS_KEY}{DIST_TIMEOUT_ENV}"
    if not any(k.lstrip("+") == timeout_key.lstrip("+") for k in o):
        o[timeout_key] = BARRIER_FLOOR_S if cpu else _barrier_timeout(backbone.key, o)
    # Ray takes runtime-env variables as strings only: `...env_vars.X=1` must reach it as '1'
    return [f"{k}={_fmt(str(v) if ENV_VARS_KEY in k else v)}" for k, v in o.items()]


def _barrier_timeout(backbone: str, o: dict[str, Any]) -> int:
    """The save barrier's timeout of a GPU cell, from what it saves, in which dtype, over how many ranks."""
    from repro.checkpoint_bytes import DEFAULT_MODEL_DTYPE
    from repro.launch.allocation_end import MODEL_DTYPE_KEY, allocation_end

    contents = o.get("actor_rollout_ref.actor.checkpoint.save_contents") or []
    ranks = int(o.get("trainer.nnodes") or 1) * int(o.get("trainer.n_gpus_per_node") or 1)
    dtype = o.get(MODEL_DTYPE_KEY, DEFAULT_MODEL_DTYPE)
    return allocation_end(backbone, [str(c) for c in contents], ranks, model_dtype=dtype).barrier_timeout_s


def command(overrides: list[str]) -> list[str]:
    """The process to start on the head node: verl's Hydra main behind our entry module."""
    return [sys.executable if sys.executable else "python", "-m", ENTRY_MODULE, *overrides]


def shell_command(overrides: list[str]) -> str:
    return " ".join(shlex.quote(part) for part in ["python", "-m", ENTRY_MODULE, *overrides])


def compose(overrides: list[str]):
    """verl's own config composition (an unknown key is an error)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="verl.trainer.config", version_base=None):
            return hydra_compose(config_name="ppo_trainer", overrides=overrides)
    except Exception as exc:
        raise ReproError(f"verl rejected the config: {' '.join(str(exc).split())[:400]}") from exc


def compose_and_validate(overrides: list[str]):
    from verl.trainer.main_ppo import validate_config
    from verl.trainer.ppo.utils import need_critic, need_reference_policy

    cfg = compose(overrides)
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # verl prints a success banner on stdout
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    except Exception as exc:
        raise ReproError(f"verl's validate_config failed: {' '.join(str(exc).split())[:400]}") from exc
    return cfg
