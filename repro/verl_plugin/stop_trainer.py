"""verl's sync trainer, stopping cleanly at a step boundary when the run's allocation is ending.

A Slurm job near its time limit asks the trainer to stop (RUN/.stop-request.json, `repro.launch.allocations`).
Without this, verl trains on until Slurm kills it, and the steps since the last `save_freq` checkpoint are
lost. `StopAtBoundaryTrainer` is verl 0.9.1's `PPOTrainerSync` registered as ``repro_sync`` through verl's
own trainer registry (`register_trainer`; `trainer.v1.trainer_mode=repro_sync`, set by the config builder),
with one change, in `on_step_end`: when a request is there, it saves the step just trained (unless the loop
saved it already) and ends the loop after that step, and `on_train_end` then leaves the record that
`repro.launch.attempt` turns into "checkpoint at step N, 0 steps lost" and exit code 75. A request found in
`on_train_begin` (the warning came while verl was starting) ends the loop before its first step.
`on_step_begin` only adds a pause point (`repro.rundir.pause`, "step:N"), inert without REPRO_PAUSE_AT, so
a test can kill a run exactly where a step begins.

Why this is consistent with verl's resume: `fit` saves at the same point of its loop (after `step()`,
right before `on_step_end`), so the checkpoint written here holds what a `save_freq` save of that step
would (actor, data loader, plugin state through the checkpoint callback), and resume_mode=auto starts the
next attempt at the step after it. Ending the loop needs no fork of `fit`: its condition is
`global_steps <= total_training_steps`, evaluated after the step has been validated, measured and logged,
so lowering `total_training_steps` to this step ends it there (`is_last_step` was computed at the top of
the iteration and stays False, so no final validation or "last step" save runs).

A generation budget (`repro run --engine verl --until-tokens N`: `+trainer.until_tokens=N`) ends the run the
same way, at the first step whose cumulative generated tokens reach it, saved there. A step's tokens are the
plugin's `tokens/generated`, which its manager logs to the run folder's sampler file before verl trains the
batch; a GRPO cell has no manager, and every response it draws is in its batch, so there they are the batch's
response tokens (verl's `response_length/mean` x its rows), added to verl's own metrics line. They are summed
over every attempt's steps up to this one (a resumed run counts the steps before it), as the CPU trainer's
budget counts them. The rule runs in `_compute_metrics`, after the step's save and validation and before its
line is logged (the step's batch is only there); the run then ends as finished, not stopped, without verl's
last-step validation (`is_last_step` stays False), which a budget run does not need.

The registry picks the class by name; from then on the trainer runs as verl's own mode: verl branches on
``trainer_mode == "sync"`` (replay buffer, TransferQueue save/restore, refill) and reads
``trainer.v1.<mode>`` sections by that name, so `__init__` puts verl's name back in the config before verl
reads it. The same hook is registered twice: ``repro_sync`` over `PPOTrainerSync` and
``repro_colocate_async`` over `PPOTrainerColocateAsync` (the async cells, repro/catalog/async_schedule.yaml).
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path

from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_colocate_async import PPOTrainerColocateAsync
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils.debug import marked_timer

from repro.launch.allocations import honour, stop_request
from repro.rundir import RunDir, sampler_file
from repro.rundir.pause import pause_at
from repro.sampling.metrics import GENERATED

logger = logging.getLogger(__name__)

TRAINER_MODE = "repro_sync"  # trainer.v1.trainer_mode: the name the sync class is registered under
ASYNC_TRAINER_MODE = "repro_colocate_async"  # and the colocate_async one
VERL_MODES = {TRAINER_MODE: "sync", ASYNC_TRAINER_MODE: "colocate_async"}  # the mode each runs as


def _sampled_tokens(run: RunDir, step: int) -> float | None:
    """`tokens/generated` of `step` from the plugin's sampler files (the latest attempt's line that has it: an
    async run's step may have been sampled by an attempt before), or None where the manager logged none (GRPO).
    Read directly: until verl logs its own line of the step, `read_metrics` does not show a sampler line."""
    for attempt in reversed(run.metrics_files()):
        side = sampler_file(attempt)
        if not side.is_file():
            continue
        found = None
        for raw in side.read_text().splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                record = json.loads(raw)
                if record.get("step") == step and GENERATED in record.get("data", {}):
                    found = record["data"][GENERATED]
        if found is not None:
            return float(found)
    return None


class StopAtBoundary:
    """The stop-at-boundary hook, mixed in before one of verl's trainers (see the module doc)."""

    def __init__(self, config) -> None:
        config.trainer.v1.trainer_mode = VERL_MODES[config.trainer.v1.trainer_mode]
        super().__init__(config)
        # the run folder: checkpoints/ lives in it (the config builder's trainer.default_local_dir)
        self.run_dir = Path(config.trainer.default_local_dir).parent
        self.stopped_at: tuple[int, bool] | None = None  # (step, saved here rather than by the loop)
        self.until_tokens = int(config.trainer.get("until_tokens") or 0)  # a generation budget; 0: none

    def _saved_by_loop(self) -> bool:
        """Whether `fit` saved this step already (its save_freq rule, less the last step, never stopped at)."""
        freq = self.config.trainer.save_freq
        return freq > 0 and self.global_steps % freq == 0

    def on_train_begin(self) -> None:
        """A request already there when the loop is about to start (the allocation was warned while verl was
        starting, which takes minutes): end before the first step, with the restored checkpoint standing,
        instead of training a step the time limit could cut. `fit` has counted the step it would train."""
        if self.stopped_at is None and stop_request(self.run_dir) is not None:
            restored = self.global_steps - 1
            self.stopped_at = (restored, False)
            self.total_training_steps = restored  # the loop's condition fails at once: no step, no save
            logger.warning("stop requested before the first step: the checkpoint at step %d stands", restored)
            return  # not the async trainer's warm-up submissions either: nothing will train them
        super().on_train_begin()

    def on_step_begin(self) -> None:
        """A pause point (`repro.rundir.pause`, REPRO_PAUSE_AT="step:N"; nothing without the variable): step N
        about to sample, the step before it trained, saved where save_freq says, logged and its weights synced.
        A test that kills the run there kills it at that moment however fast the machine is, instead of
        polling the metrics file and hoping the next step has not been logged by the time its kill lands."""
        pause_at(self.run_dir, "step", self.global_steps)
        super().on_step_begin()

    def _compute_metrics(self, batch, metrics, timing_raw, global_steps, epoch):
        """verl's step metrics, then the step's generated tokens and the budget's rule (see the module doc)."""
        rows = sum(not tag.get("is_padding", False) for tag in batch.tags)
        super()._compute_metrics(batch, metrics, timing_raw, global_steps, epoch)
        run = RunDir(self.run_dir)
        this = _sampled_tokens(run, self.global_steps)  # the plugin manager's count
        if this is None and "response_length/mean" in metrics:  # GRPO: every response drawn is in the batch
            this = round(float(metrics["response_length/mean"]) * rows)
            metrics[GENERATED] = float(this)
        if not self.until_tokens or this is None or self.global_steps >= self.total_training_steps:
            return
        earlier = run.read_metrics().by_step.items()  # verl's lines of the steps before, sampler lines merged in
        generated = int(this) + sum(int(d.get(GENERATED, 0)) for s, d in earlier if s < self.global_steps)
        if generated >= self.until_tokens:  # this step is the run's last, saved here unless the loop did
            if not self._saved_by_loop():
                with marked_timer("save_checkpoint", timing_raw, color="green"):
                    self._save_checkpoint()
            self.total_training_steps = self.global_steps
            logger.warning(
                "token budget %d reached (%d generated) at step %d", self.until_tokens, generated, self.global_steps
            )

    def on_step_end(self) -> None:
        if self.stopped_at is None and self.global_steps < self.total_training_steps:
            request = stop_request(self.run_dir)
            if request is not None:
                saved_now = not self._saved_by_loop()
                if saved_now:
                    with marked_timer("save_checkpoint", self.timing_raw, color="green"):
                        self._save_checkpoint()
                self.stopped_at = (self.global_steps, saved_now)
                self.total_training_steps = self.global_steps  # fit logs this step, then its loop ends
                logger.warning(
                    "stop requested (%s): checkpoint at step %d; training ends after this step",
                    request.get("reason", "allocation ending"),
                    self.global_steps,
                )
        super().on_step_end()

    def on_train_end(self) -> None:
        super().on_train_end()
        if self.stopped_at is not None:  # the step is saved and logged: tell the attempt it may stop
            step, saved_now = self.stopped_at
            honour(self.run_dir, step, saved_now)


@register_trainer(TRAINER_MODE)
class StopAtBoundaryTrainer(StopAtBoundary, PPOTrainerSync):
    """`PPOTrainerSync` that honours RUN/.stop-request.json at the end of a step; its agent loops' client can
    abort one session's request (the early exit, `repro.verl_plugin.abortable`), verl's otherwise."""

    def get_llm_client(self):
        from repro.verl_plugin.abortable import AbortableLLMServerClient

        return self.llm_server_manager.get_client(client_cls=AbortableLLMServerClient)


@register_trainer(ASYNC_TRAINER_MODE)
class StopAtBoundaryAsyncTrainer(StopAtBoundary, PPOTrainerColocateAsync):
    """`PPOTrainerColocateAsync` that honours RUN/.stop-request.json at the end of a step."""
