"""Which verl saves stay whole: the plugin's retention, run after each save and at the start of each attempt.

verl 0.9.1 prunes only the saves of its own process (`max_actor_ckpt_to_keep`, utils/checkpoint/
checkpoint_manager.py) and prunes by deleting whole actor folders, weights included. So the config builder
leaves verl's limit null (verl keeps every save) and passes the catalog's `checkpoints_kept` K here through
a Ray runtime-env variable (every verl process, the TaskRunner that runs the checkpoint callback included,
sees it; the attempt wrapper reads the same override from the trainer command). Every save older than the
newest K (and not the one the tracker file names) is slimmed to its bf16 Hugging Face weights
(`repro.rundir.slim`), across allocations, so evaluation finds every save and the disk holds K full saves.

Nothing is slimmed while a live `repro eval` holds the run's eval lock: the log says so and the next save or
attempt does it. A slim that fails is logged and never stops training.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from repro.overrides import ENV_PREFIX, runtime_env_vars
from repro.sizes import size_text

KEPT_ENV = "REPRO_CHECKPOINTS_KEPT"
KEPT_OVERRIDE = f"+{ENV_PREFIX}{KEPT_ENV}"  # the config builder's key


def _int(text: object) -> int | None:
    try:
        value = int(str(text).strip().strip("'\""))
    except ValueError:
        return None
    return value if value >= 1 else None


def kept_from_env(environ: Mapping[str, str] | None = None) -> int | None:
    """K in a verl process (the Ray runtime env), or None: no retention asked for."""
    return _int((os.environ if environ is None else environ).get(KEPT_ENV, ""))


def kept_from_overrides(argv: Sequence[str]) -> int | None:
    """K from a trainer command's Hydra overrides (the attempt wrapper's view of the same setting), read as
    the entry module hands them to the driver's environment."""
    return kept_from_env(runtime_env_vars(list(argv)))


def kept_from_config(cfg: Any) -> int | None:
    """K from a composed verl config (the preflight's disk figure)."""
    node = cfg
    for part in ENV_PREFIX.strip(".").split("."):
        node = node.get(part) if node is not None else None
    return None if node is None else _int(node.get(KEPT_ENV, ""))


def retain(checkpoints_dir: Path, keep: int | None, when: str) -> list[str]:
    """Slim every save of the run older than the newest `keep` (and not the tracker's); the log lines to
    print. No-op when `keep` is None (a config not built by repro)."""
    from repro.rundir import slim

    if keep is None or not checkpoints_dir.is_dir():
        return []
    try:
        pending, whole = slim.to_slim(checkpoints_dir, keep)
        if not pending:
            return _whole(whole)
        from repro.evaluation.shards import eval_lock_holder

        eval_dir = checkpoints_dir.parent / "eval"
        holder = eval_lock_holder(eval_dir)
        if holder is not None:
            steps = ", ".join(str(s) for s in pending)
            return [
                f"repro: checkpoints: {len(pending)} older save(s) (step {steps}) not slimmed {when}: a repro eval "
                f"(pid {holder}) holds {eval_dir / '.eval.lock'}; the next save or attempt slims them"
            ]
        done, whole = slim.slim_older_saves(checkpoints_dir, keep, why=when)
    except Exception as exc:  # retention must never stop training; the next call tries again
        return [
            f"repro: checkpoints: slimming older saves failed {when} ({type(exc).__name__}: {exc}); "
            "training goes on and the next save or attempt tries again"
        ]
    lines = [
        f"repro: checkpoints: global_step_{d.step} slimmed {when}: {size_text(d.bytes_before, 2)} -> "
        f"{size_text(d.bytes_after, 2)} (its Hugging Face weights kept in bf16 for evaluation, resume-only parts "
        f"removed; the newest {keep} saves stay whole)"
        for d in done
    ]
    return lines + _whole(whole)


def _whole(whole: list[int]) -> list[str]:
    if not whole:
        return []
    steps = ", ".join(str(s) for s in whole)
    return [
        f"repro: checkpoints: older save(s) at step {steps} hold no Hugging Face weights (hf_model not in "
        "actor.checkpoint.save_contents), so they stay whole: their FSDP shards are their only weights"
    ]
