"""verl checkpoint hook: Est's estimator (and an async run's pool statistics) saved inside each
`global_step_<k>` folder verl writes."""

from __future__ import annotations

from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from repro.verl_plugin import state


class AdaStateCheckpoint(CheckpointCallback):
    """Named by `trainer.checkpoint_callback_class`; a no-op for methods without plugin state."""

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        state.save(checkpoint_dir, pools=getattr(trainer, "trainer_mode", "sync") != "sync")
