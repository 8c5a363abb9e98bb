"""The CPU RL trainer: the sampling core drives generation, verl's losses drive the update.

Per step, as verl's trainer does it: draw a prompt batch, let the method's `StepSampler` decide how many
responses each prompt gets (rounds for Seq, refills for DAPO, an allocation for Est), score them with
the project's reward function, take the update groups and advantages from the core, recompute the old
log-probs with the current policy, and run the PPO mini-batch updates. A checkpoint after every step
(model, optimizer, scheduler, data order, RNG states, Est estimator) makes a SIGKILL cost at most the
step in flight; metrics go to one verl file-logger JSON-lines file per attempt (the project's own
fsynced MetricsWriter, the durable source), and also, with `repro run --logger ...`, to verl's `Tracking`
backends (tensorboard under <run folder>/tensorboard, wandb), as verl cells log.

Every `eval_every` steps (and at the first and last) the updated model is scored on a fixed held-out
slice of the test tiers (`repro.local.heldout`): `heldout/accuracy`, its responses `heldout/n`, and
`timing_s/heldout`, which `timing_s/step` leaves out, so step times still compare with the paper's. It
samples from its own generator, so it cannot change what training draws.

A job whose allocation is ending asks the trainer to stop (RUN/.stop-request.json, written by the Slurm
script's USR1 trap; `repro.launch.allocations`): `fit` looks for it after each step and, since every step
is already checkpointed, stops there with nothing lost by raising `StopRequested`; a request already there
when `fit` begins (the warning came while the attempt was starting) stops it before its first step.
"""

from __future__ import annotations

import json
import os
import pickle
import time
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from repro import arithmetic
from repro.cpu_lm.adamw import AdamW
from repro.cpu_lm.generate import make_batch, response_logprobs
from repro.cpu_lm.model import quiet_transformers
from repro.launch.allocations import discard_request, stop_request
from repro.launch.attempt import THREADS_ENV
from repro.local.config import RunConfig
from repro.local.heldout import HeldoutEval, heldout_problems, is_eval_step
from repro.local.ppo import PPOSettings, actor_config, ppo_update, rollout_correction, select
from repro.local.prompts import EpochLoader, load_prompts
from repro.local.responses import ResponseSampling
from repro.local.tracking import open_tracking
from repro.loggers import ALWAYS
from repro.prompting import template_for
from repro.rundir import MetricsWriter, RunDir
from repro.rundir.pause import pause_at
from repro.sampling import Memory, SamplerSpec, StepSampler, estimator_for, policy_for
from repro.sampling.drive import sync_rounds
from repro.sampling.early_exit import BiasTally
from repro.sampling.metrics import GENERATED

PENDING_FILE = "pending_step.pt"  # async schedule: the next step's batch, sampled before this step's update


class StopRequested(Exception):
    """`fit` stopped after `step` (checkpointed) because the run's allocation is ending."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped on request after step {step}")
        self.step = step


@dataclass
class Sampled:
    """A step's sampling, ready for its update: what the async schedule hands from the generating thread to
    the training one, and saves in the checkpoint so a resumed run updates on exactly the same batch."""

    step: int
    result: Any  # repro.sampling.StepResult
    batch: Any  # repro.cpu_lm.generate.Batch
    adv: torch.Tensor
    timing: dict[str, float]
    epoch: int
    rollout_log_prob: torch.Tensor | None = None  # the sampling weights' log-probs (async schedule only)
    epochs_seen: float = 0.0  # passes over the prompt set once this step's prompts were drawn


def _stats(prefix: str, values: np.ndarray) -> dict[str, float]:
    if values.size == 0:
        return {}
    return {
        f"{prefix}/mean": float(values.mean()),
        f"{prefix}/max": float(values.max()),
        f"{prefix}/min": float(values.min()),
    }


# modules a pending step's classes were pickled under before issue 47 moved them: a pending_step.pt saved then
# names its batch repro.local.generate.Batch, and a run killed with one still resumes on it
MOVED_MODULES = {"repro.local.generate": "repro.cpu_lm.generate"}


class _MovedModules(pickle.Unpickler):
    """Finds a class under its module's name of today (`MOVED_MODULES`)."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_MODULES.get(module, module), name)


def load_pending(path: Path) -> Sampled:
    """A checkpoint's pending step (`PENDING_FILE`), whichever module names its classes."""
    pickle_module = types.ModuleType("pickle")  # torch.load unpickles with pickle_module.Unpickler
    pickle_module.Unpickler = _MovedModules  # type: ignore[attr-defined]
    pickle_module.load = pickle.load  # type: ignore[attr-defined]
    return torch.load(path, weights_only=False, pickle_module=pickle_module)


class CpuTrainer(ResponseSampling):
    def __init__(
        self,
        config: RunConfig,
        rundir: RunDir,
        on_step: Callable[[int, dict], None] | None = None,
        loggers: Sequence[str] = ALWAYS,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        quiet_transformers()
        self.config = config
        self.train = config.train
        self.rundir = rundir
        self.on_step = on_step
        self.loggers = tuple(loggers)  # not part of the config: a resume may change them
        # a launcher running several cells at once gives each its share of the cores (REPRO_TORCH_THREADS);
        # not part of the config, so the same run may resume under another launcher
        # (repro.arithmetic pins one thread: the thread count is part of the arithmetic)
        torch.set_num_threads(arithmetic.threads(int(os.environ.get(THREADS_ENV) or self.train.threads)))
        self.spec = SamplerSpec.from_dict(config.sampler)
        model_path = config.model["path"]
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        # fp32 whatever the checkpoint's config says (SmolLM2's says bfloat16): the update runs in fp32, as
        # verl's FSDP keeps fp32 master weights
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.eval()
        self.prompts = load_prompts(Path(config.data["folder"]) / "train.parquet", self.tokenizer)
        self.loader = EpochLoader(len(self.prompts), config.seed)
        self.generator = torch.Generator().manual_seed(config.seed)
        self.estimator: Memory | None = estimator_for(self.spec)  # Est's estimator, or another method's state
        self.optimizer = AdamW(self.model.parameters(), lr=self.train.lr, weight_decay=self.train.weight_decay)
        warm = max(1, self.train.lr_warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / warm))
        self.ppo = PPOSettings(
            self.train.clip_ratio_low,
            self.train.clip_ratio_high,
            self.train.entropy_coeff,
            self.train.loss_agg_mode,
            self.train.grad_clip,
        )
        updates = self.train.train_prompt_batch_size // self.train.ppo_mini_batch_size
        self.actor_cfg = actor_config(self.ppo, self.train.ppo_mini_batch_size, rollout_n=self.spec.n)
        self.updates_per_step = updates
        self.heldout: HeldoutEval | None = None
        if self.train.eval_every:
            problems = heldout_problems(self.train.heldout_per_tier)
            self.heldout = HeldoutEval(
                self.tokenizer,
                problems,
                self.train.heldout_samples,
                self.train.max_response_length,
                template_for(config.backbone),
            )
        self.step = 0
        self.tokens_generated = 0  # every step's tokens/generated so far: what a token budget is measured against
        self.kept_steps: set[int] = set()  # the first steps to reach each of keep_tokens: never pruned
        self.moment = "starting"  # where the trainer is: what an attempt ended by a signal records
        self._pending: Sampled | None = None  # async: the next step's sampling, done while this one trained
        self._behaviour: torch.nn.Module | None = None  # async: the weights the next step samples with

    # ---- checkpoints ---------------------------------------------------------------------------
    def save(self, step: int, metrics: dict[str, float]) -> None:
        self.moment = f"saving step {step}"
        staging = self.rundir.staging_checkpoint_dir(step)
        self.model.save_pretrained(staging / "model")
        self.tokenizer.save_pretrained(staging / "model")
        pause_at(self.rundir.path, "save", step)  # half a save: the weights, no state yet
        torch.save(
            {
                "step": step,
                "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(),
                "generator": self.generator.get_state(),
                "loader": self.loader.state_dict(),
                "tokens_generated": self.tokens_generated,
                "kept_steps": sorted(self.kept_steps),
            },
            staging / "trainer_state.pt",
        )
        if self.estimator is not None:
            self.estimator.save(staging / "estimator.json")
        if self._pending is not None:  # async: the next step, sampled by the weights before this update
            torch.save(self._pending, staging / PENDING_FILE)
        (staging / "metrics.json").write_text(json.dumps({"step": step, "data": metrics}))
        self.rundir.commit_checkpoint(step, staging)
        self.rundir.prune_checkpoints(keep_every=self.train.save_freq, keep_last=1, also=self.kept_steps)

    def restore(self) -> dict | None:
        """Load the latest checkpoint; returns its step's metrics record (to re-log if it was lost)."""
        from transformers import AutoModelForCausalLM

        latest = self.rundir.latest_checkpoint()
        if latest is None:
            return None
        step, folder = latest
        self.model = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32)
        self.model.eval()
        self.optimizer = AdamW(self.model.parameters(), lr=self.train.lr, weight_decay=self.train.weight_decay)
        warm = max(1, self.train.lr_warmup_steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda s: min(1.0, (s + 1) / warm))
        state = torch.load(folder / "trainer_state.pt", weights_only=False)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.loader.load_state_dict(state["loader"])
        # always there: a run saved before budgets has no until_tokens in its config, so its resume is refused
        self.tokens_generated = state["tokens_generated"]
        self.kept_steps = set(state["kept_steps"])
        if self.estimator is not None:
            self.estimator = policy_for(self.spec).load_memory(folder / "estimator.json")
        pending = folder / PENDING_FILE
        self._pending = load_pending(pending) if pending.exists() else None
        self.step = step
        return json.loads((folder / "metrics.json").read_text())

    def budget_reached(self) -> bool:
        """The run's generation budget (`until_tokens`) is spent: it ends at this step."""
        return 0 < self.train.until_tokens <= self.tokens_generated

    # ---- one step ------------------------------------------------------------------------------
    def _sample_step(self, step: int, model: torch.nn.Module, behaviour_logprobs: bool = False) -> Sampled:
        """Everything of a step before the update: the method's sampling with `model`, the update batch and its
        advantages (Est's estimator learns here). With `behaviour_logprobs`, also the sampling model's
        log-probs of the update batch, which the async schedule's correction needs."""
        timing = {"gen": 0.0, "reward": 0.0}
        sampler = StepSampler(
            self.spec, self.loader.draw(self.train.train_prompt_batch_size), step=step, estimator=self.estimator
        )
        pools: dict[int, list[list[int]]] = {}
        cut = self.spec.early_exit != "off"
        generated = cancelled = 0  # under the early exit: tokens of every response, and of the cancelled ones
        bias = BiasTally()
        for slots, counts in sync_rounds(sampler, self.loader.draw):
            t0 = time.perf_counter()
            if cut:
                kept, round_tokens, round_cancelled = self._generate_cut(model, sampler, slots, counts, bias)
                for slot, responses in kept.items():
                    pools.setdefault(slot, []).extend(responses)
                generated, cancelled = generated + round_tokens, cancelled + round_cancelled
                timing["gen"] += time.perf_counter() - t0
                continue
            ids = sampler.prompt_ids
            batch_prompts = [self.prompts[ids[s]] for s in slots]
            responses, scores = self._generate(model, batch_prompts, counts)
            timing["gen"] += time.perf_counter() - t0
            rewards = np.zeros((slots.size, int(counts.max())))
            cursor = 0
            for row, (slot, count) in enumerate(zip(slots, counts, strict=True)):
                pools.setdefault(int(slot), []).extend(responses[cursor : cursor + count])
                rewards[row, :count] = scores[cursor : cursor + count]
                cursor += count
            sampler.observe_many(slots, rewards)
        t0 = time.perf_counter()
        result = sampler.finalize()
        ids = result.prompt_ids
        prompts = [self.prompts[ids[s]].question_ids for s in result.slot]
        responses = [pools[int(s)][int(i)] for s, i in zip(result.slot, result.index, strict=True)]
        batch = make_batch(prompts, responses, self.tokenizer.pad_token_id)
        # the step's compute, as the verl plugin logs it too: every response drawn, and those in the update
        result.metrics[GENERATED] = float(sum(len(r) for pool in pools.values() for r in pool))
        if cut:  # every response decoded counts, the dropped and the cancelled ones (as far as they got) too
            result.metrics[GENERATED] = float(generated)
            result.metrics["exit/tokens_cancelled"] = float(cancelled)
            result.metrics.update(bias.metrics())
        result.metrics["tokens/trained"] = float(batch.response_mask.sum())
        adv = torch.tensor(result.advantage, dtype=torch.float32)[:, None] * batch.response_mask
        timing["adv"] = time.perf_counter() - t0
        rollout_log_prob = None
        if behaviour_logprobs:
            t0 = time.perf_counter()
            with torch.no_grad():
                rollout_log_prob, _ = response_logprobs(model, batch, with_entropy=False, share_prompts=True)
            timing["rollout_log_prob"] = time.perf_counter() - t0
        seen = self.loader.epoch + self.loader.pos / self.loader.size
        return Sampled(step, result, batch, adv, timing, self.loader.epoch, rollout_log_prob, seen)

    def train_step(self, step: int) -> dict[str, float]:
        """One synchronous step: sample with the current weights, then update them."""
        t_step = time.perf_counter()
        metrics = self._update(self._sample_step(step, self.model))
        metrics["timing_s/step"] = time.perf_counter() - t_step
        return metrics

    def _update(self, sampled: Sampled, staleness: int = 0) -> dict[str, float]:
        """The PPO update of one sampled step. A batch sampled by older weights (`staleness` > 0) is corrected
        with verl's own truncated token-level importance weights (rollout_is=token, threshold 2), as verl's
        async trainers do with algorithm.rollout_correction."""
        result, batch, adv, timing = sampled.result, sampled.batch, sampled.adv, dict(sampled.timing)
        pause_at(self.rundir.path, "step", sampled.step)  # mid-step: sampled, not updated
        t0 = time.perf_counter()
        with torch.no_grad():
            old_log_prob, _ = response_logprobs(self.model, batch, with_entropy=False, share_prompts=True)
        timing["old_log_prob"] = time.perf_counter() - t0
        is_weights, corr_metrics = None, {}
        if sampled.rollout_log_prob is not None:
            is_weights, corr_metrics = rollout_correction(old_log_prob, sampled.rollout_log_prob, batch.response_mask)
        t0 = time.perf_counter()
        actor: dict[str, list[float]] = {}
        for rows in self._mini_batches(result.slot):
            out = ppo_update(
                self.model,
                self.optimizer,
                select(batch, rows),
                adv[rows],
                old_log_prob[rows],
                self.actor_cfg,
                self.ppo,
                rollout_is_weights=None if is_weights is None else is_weights[rows],
            )
            for k, v in out.items():
                actor.setdefault(k, []).append(v)
        self.scheduler.step()
        timing["update_actor"] = time.perf_counter() - t0
        lengths = batch.response_mask.sum(dim=1).numpy()
        metrics: dict[str, float] = {
            **_stats("critic/score", result.reward),
            **_stats("critic/rewards", result.reward),
            **_stats("critic/advantages", result.advantage),
            **_stats("response_length", lengths),
            "response_length/clip_ratio": float(np.mean(lengths >= self.train.max_response_length)),
            **{k: float(np.mean(v)) for k, v in actor.items()},
            "actor/lr": float(self.scheduler.get_last_lr()[0]),
            **result.metrics,
            **corr_metrics,
            "training/global_step": float(sampled.step),
            "training/epoch": float(sampled.epoch),
            # how often a long baseline has repeated its prompts: part of what a compute-matched comparison costs
            "training/epochs_seen": float(sampled.epochs_seen),
        }
        if self.train.async_rollout:
            metrics["async/staleness"] = float(staleness)
        for key, seconds in timing.items():
            metrics[f"timing_s/{key}"] = seconds
        return metrics

    def _async_step(self, step: int, last: int) -> dict[str, float]:
        """One step of the one-step-stale schedule: step+1 is sampled in a thread by a copy of the weights
        before this update while the update runs; this step's batch was sampled the same way one step ago
        (or, first in an attempt without a saved pending batch, by the current weights: staleness 0).

        What runs concurrently touches disjoint state: the thread owns the sampling generator, the data
        loader, Est's estimator and the weight copy; the main thread owns the model, optimizer and
        scheduler. The pending batch is part of the checkpoint, so a resume updates on the same batch."""
        import copy
        import threading

        t_step = time.perf_counter()
        current, staleness = self._pending, 1
        if current is None or current.step != step:
            current, staleness = self._sample_step(step, self.model, behaviour_logprobs=True), 0
        self._pending = None
        ahead: dict[str, Any] = {}
        thread = None
        if step < last:
            if self._behaviour is None:
                self._behaviour = copy.deepcopy(self.model)
            else:
                self._behaviour.load_state_dict(self.model.state_dict())
            self._behaviour.eval()

            def sample_ahead() -> None:
                ahead["t0"] = time.perf_counter()
                try:
                    ahead["sampled"] = self._sample_step(step + 1, self._behaviour, behaviour_logprobs=True)
                except BaseException as exc:  # re-raised in the main thread
                    ahead["error"] = exc
                ahead["t1"] = time.perf_counter()

            thread = threading.Thread(target=sample_ahead, name=f"sample-step-{step + 1}", daemon=True)
            thread.start()
        u0 = time.perf_counter()
        metrics = self._update(current, staleness=staleness)
        u1 = time.perf_counter()
        if thread is not None:
            thread.join()
            if "error" in ahead:
                raise ahead["error"]
            self._pending = ahead["sampled"]
            overlap = max(0.0, min(u1, ahead["t1"]) - max(u0, ahead["t0"]))
            metrics["timing_s/overlap"] = overlap  # generation seconds hidden behind the update
            metrics["timing_s/gen_ahead"] = ahead["t1"] - ahead["t0"]
        metrics["timing_s/step"] = time.perf_counter() - t_step
        return metrics

    def _mini_batches(self, slot: np.ndarray) -> list[torch.Tensor]:
        """Split the update rows into the paper's number of PPO updates, whole prompts per mini-batch."""
        prompts = np.unique(slot)
        chunks = np.array_split(prompts, min(self.updates_per_step, prompts.size))
        return [torch.from_numpy(np.flatnonzero(np.isin(slot, c))) for c in chunks if c.size]

    # ---- the run -------------------------------------------------------------------------------
    def fit(self, metrics_path: Path) -> int:
        """Train to the configured number of steps from wherever the checkpoints say; returns last step.
        Raises `StopRequested` after a step when the run folder holds a stop request (or before the first
        step, when the request came while the attempt was starting)."""
        record = self.restore()
        resumed_from = self.step
        self.rundir.set_attempt(resumed_from_step=resumed_from or None, loggers=list(self.loggers))
        tracking = open_tracking(self.config, self.rundir, self.loggers)
        exit_code = 1
        stopped: int | None = None
        try:
            with MetricsWriter(metrics_path) as writer:
                if record is not None and record["step"] not in self.rundir.logged_steps():
                    writer.log(record["step"], record["data"])  # the checkpoint outlived its metrics line
                    if tracking is not None:
                        tracking.log(record["data"], record["step"])
                last = self.train.total_training_steps
                if self.step < last and stop_request(self.rundir.path) is not None:
                    # this job's allocation was warned while the attempt was starting (a loaded node can take
                    # most of a short allocation to get here): the restored checkpoint stands, so stop before a
                    # step the time limit could cut, and let the job requeue
                    discard_request(self.rundir.path)
                    stopped = self.step
                todo = range(self.step + 1, last + 1) if stopped is None and not self.budget_reached() else range(0)
                for step in todo:
                    self.moment = f"step {step}"
                    metrics = self._async_step(step, last) if self.train.async_rollout else self.train_step(step)
                    before = self.tokens_generated
                    self.tokens_generated += int(metrics[GENERATED])
                    if any(before < t <= self.tokens_generated for t in self.train.keep_tokens):
                        self.kept_steps.add(step)  # before the save: the checkpoint holds both
                    if self.heldout is not None and is_eval_step(step, self.train.eval_every, last):
                        # after the update, so it scores the model saved as this step's checkpoint
                        metrics.update(self.heldout(self.model, self.config.seed, step))
                    t0 = time.perf_counter()
                    self.save(step, metrics)
                    metrics["timing_s/save_checkpoint"] = time.perf_counter() - t0
                    writer.log(step, metrics)  # the durable line first: a tracking backend may fail
                    self.moment = f"after step {step}"
                    if tracking is not None:
                        tracking.log(metrics, step)
                    self.step = step
                    if self.on_step:
                        self.on_step(step, metrics)
                    if self.budget_reached():
                        break  # the first step that reaches the budget is the run's last, saved above
                    if step < last and stop_request(self.rundir.path) is not None:
                        # the allocation is ending: this step's checkpoint is saved above (every step is a
                        # save step here), so stopping now loses nothing
                        discard_request(self.rundir.path)
                        stopped = step
                        break
            exit_code = 0
        finally:
            if tracking is not None:
                tracking.finish(exit_code=exit_code)
        if stopped is not None:
            raise StopRequested(stopped)
        return self.step
