"""Plugin state that must survive a verl restart: Est's estimator, kept in the TaskRunner process.

verl saves checkpoints from the trainer, which runs in the same Ray process as our rollout manager, so a
module-level holder is visible to both: the manager updates the estimator every step, the checkpoint
callback writes it next to verl's own files, and the manager reads it back on resume.
"""

from __future__ import annotations

from pathlib import Path

from repro.sampling import BetaBernoulliEstimator, SamplerSpec, make_estimator

STATE_FILE = "reinforce_ada_state.json"
_ESTIMATOR: BetaBernoulliEstimator | None = None


def estimator(spec: SamplerSpec) -> BetaBernoulliEstimator | None:
    """The run's estimator (Est only), created on first use."""
    global _ESTIMATOR
    if spec.kind != "est":
        return None
    if _ESTIMATOR is None:
        _ESTIMATOR = make_estimator(spec)
    return _ESTIMATOR


def save(checkpoint_dir: str | Path) -> Path | None:
    if _ESTIMATOR is None:
        return None
    path = Path(checkpoint_dir) / STATE_FILE
    _ESTIMATOR.save(path)
    return path


def restore(checkpoints_root: str | Path) -> int | None:
    """Load the estimator from the newest verl checkpoint under `checkpoints_root`; returns its step.

    verl writes `latest_checkpointed_iteration.txt` before calling the save hook, so a checkpoint whose
    state file is missing (killed in between) falls back to the previous one that has it.
    """
    global _ESTIMATOR
    root = Path(checkpoints_root)
    steps = sorted(
        (int(p.name.removeprefix("global_step_")) for p in root.glob("global_step_*") if p.name[12:].isdigit()),
        reverse=True,
    )
    for step in steps:
        path = root / f"global_step_{step}" / STATE_FILE
        if path.exists():
            _ESTIMATOR = BetaBernoulliEstimator.load(path)
            return step
    return None


def reset() -> None:
    global _ESTIMATOR
    _ESTIMATOR = None
