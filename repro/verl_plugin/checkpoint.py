"""verl checkpoint hook, run on the driver after each save: Est's estimator (and an async run's pool
statistics) saved inside the `global_step_<k>` folder verl wrote, then the run's older saves slimmed to
their bf16 Hugging Face weights (`repro.rundir.retention`; verl itself keeps every save)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from repro.rundir import retention
from repro.verl_plugin import state


class AdaStateCheckpoint(CheckpointCallback):
    """Named by `trainer.checkpoint_callback_class`."""

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        state.save(checkpoint_dir, pools=getattr(trainer, "trainer_mode", "sync") != "sync")
        keep = retention.kept_from_env()
        for line in retention.retain(Path(checkpoint_dir).parent, keep, f"after the save at step {global_step}"):
            print(line, flush=True)
