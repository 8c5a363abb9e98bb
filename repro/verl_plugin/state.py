"""Plugin state that must survive a verl restart: Est's estimator, kept in the TaskRunner process.

verl saves checkpoints from the trainer, which runs in the same Ray process as our rollout manager, so a
module-level holder is visible to both: the manager updates the estimator every step, the checkpoint
callback writes it next to verl's own files, and the manager reads it back on resume.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
from pathlib import Path

from repro.atomic import write_text
from repro.errors import ReproError
from repro.sampling import BetaBernoulliEstimator, Memory, SamplerSpec, policy_for
from repro.verl_plugin import pool_stats

STATE_FILE = "reinforce_ada_state.json"
POOL_STATS_FILE = "reinforce_ada_pool_stats.json"  # async runs: the pools of sampled, untrained prompts
_ESTIMATOR: Memory | None = None  # Est's estimator, or another method's state across steps
logger = logging.getLogger(__name__)


def estimator(spec: SamplerSpec) -> Memory | None:
    """The run's state across steps (Est's estimator, Knapsack's buffer, GRESO's histories), created on first use."""
    global _ESTIMATOR
    if not policy_for(spec).keeps_estimator:
        return None
    if _ESTIMATOR is None:
        _ESTIMATOR = policy_for(spec).new_memory()
    return _ESTIMATOR


def save(checkpoint_dir: str | Path, pools: bool = False) -> Path | None:
    """Est's estimator, and with `pools` (an async run) the pool statistics still held: such a run trains
    prompts sampled before the checkpoint after it; verl's TransferQueue checkpoint keeps their responses,
    this file their pools."""
    stats = pool_stats.dump() if pools else None
    if stats:
        write_text(Path(checkpoint_dir) / POOL_STATS_FILE, json.dumps(stats))
    if _ESTIMATOR is None:
        return None
    path = Path(checkpoint_dir) / STATE_FILE
    _ESTIMATOR.save(path)
    return path


def restore_pool_stats(
    checkpoints_root: str | Path, resume_mode: str = "auto", resume_from_path: str | None = None
) -> int | None:
    """Load the pool statistics saved with the checkpoint verl resumes from; returns how many, or None when
    verl starts from scratch or the checkpoint held none (a sync run's, or one killed before the hook)."""
    folder = resume_folder(checkpoints_root, resume_mode, resume_from_path)
    if folder is None or not (folder / POOL_STATS_FILE).exists():
        return None
    return pool_stats.load(json.loads((folder / POOL_STATS_FILE).read_text()))


def resume_folder(checkpoints_root: str | Path, resume_mode: str = "auto", resume_from_path: str | None = None):
    """The `global_step_<k>` folder verl 0.9.1 resumes from, by its own rule (`PPOTrainer._load_checkpoint`
    in verl/trainer/ppo/v1/trainer_base.py): `resume_from_path` under resume_mode=resume_path, else the step
    in `latest_checkpointed_iteration.txt` under `default_local_dir` (verl's `find_latest_ckpt_path`); None
    when verl trains from scratch (resume disabled, no tracker file, or the folder it names is missing)."""
    if resume_mode == "disable":
        return None
    if resume_mode == "resume_path":
        if not resume_from_path:
            return None  # verl itself asserts on this
        return Path(os.path.abspath(resume_from_path))
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    with contextlib.redirect_stdout(io.StringIO()):  # verl prints what it found
        found = find_latest_ckpt_path(os.path.abspath(checkpoints_root))
    return None if found is None else Path(found)


def restore(
    checkpoints_root: str | Path,
    resume_mode: str = "auto",
    resume_from_path: str | None = None,
    spec: SamplerSpec | None = None,
) -> int | None:
    """Load the estimator saved with the checkpoint verl resumes from (`resume_folder`); returns its step, or
    None when verl starts from scratch (the estimator then starts fresh too).

    verl writes `latest_checkpointed_iteration.txt` before it calls the save hook, so a kill in between
    leaves verl resuming a step whose state file was never written. That refuses (a WARNING, then
    ReproError) rather than restoring an older estimator or starting a fresh one: either would silently pair
    the step-k policy with another step's pass-rate beliefs, and the run would be a different method from
    there on while its folder still says Est. The window is a few milliseconds, so this is rare, and the
    error names the consistent way back: resume from the newest checkpoint that does have the state file.
    """
    global _ESTIMATOR
    folder = resume_folder(checkpoints_root, resume_mode, resume_from_path)
    if folder is None:
        return None
    step = int(folder.name.rsplit("global_step_", 1)[-1])
    path = folder / STATE_FILE
    if not path.exists():
        root = folder.parent
        earlier = sorted(
            (int(p.name[12:]) for p in root.glob("global_step_*") if p.name[12:].isdigit() and int(p.name[12:]) < step),
            reverse=True,
        )
        usable = next((k for k in earlier if (root / f"global_step_{k}" / STATE_FILE).exists()), None)
        fix = (
            f"resume from global_step_{usable} with --set trainer.resume_mode=resume_path "
            f"--set trainer.resume_from_path={root / f'global_step_{usable}'}"
            if usable is not None
            else "no earlier checkpoint has it; start the run again with --overwrite"
        )
        message = f"verl resumes from {folder}, which has no {STATE_FILE} (killed before the save hook ran); {fix}"
        logger.warning(message)
        raise ReproError(message)
    _ESTIMATOR = policy_for(spec).load_memory(path) if spec is not None else BetaBernoulliEstimator.load(path)
    return step


def reset() -> None:
    global _ESTIMATOR
    _ESTIMATOR = None
