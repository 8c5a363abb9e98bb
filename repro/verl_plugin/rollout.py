"""Reinforce-Ada's multi-round sampling as a verl 0.9.1 agent-loop manager (no fork).

Named by `actor_rollout_ref.rollout.agent.agent_loop_manager_class`. Validation batches take verl's
default path. For a training batch the manager runs the sampling core over the whole batch
(`run_adaptive_step`: synchronous rounds with a barrier, or one stream per prompt), asking agent-loop
workers for `count` more scored responses of a prompt at a time. A worker runs verl's own agent loop
(the server client, the chat template, the custom reward function) but keeps the outputs to itself
instead of publishing them; once the core has chosen each prompt's update group, the worker publishes
exactly those to TransferQueue under `{uid}_{j}_0`, as verl's default worker would for `rollout.n`
sessions, and marks the prompt finished. Per-prompt pool statistics go to `pool_stats`, where the
`reinforce_ada` advantage estimator (same process) reads them.

DAPO (`algorithm.reinforce_ada.kind=dapo`, grpo advantage) takes the same path with refills: when the
core wants more prompts, the manager draws them from its own deterministic stream over the training set
and begins them on the workers (registered in TransferQueue as prompts, with fresh uids); after the step
only the kept mixed groups are published, the other prompt keys are cleared, so verl's replay buffer
finds exactly `train_batch_size` terminal prompts. What verl's trainer reads and why verl's own
`filter_groups` is not used: `repro.verl_plugin.refill`.

Under verl's async trainers (`trainer.v1.trainer_mode` colocate_async, `repro run --async`) the manager
returns from `generate_sequences` at once, as verl's own TransferQueue manager does: each batch's adaptive
step runs on a persistent event loop in a helper thread, so the batch verl submits ahead (its
`num_warmup_batches`) is sampled while the trainer waits for the current one, and verl's replay buffer takes
prompts as they finish, staleness bounded by `max_off_policy_threshold`. Pool statistics are then kept for
as many steps as that bound lets a prompt wait, and go into each checkpoint (`state.save`), because verl
restores the sampled-but-untrained prompts with it.

Everything verl-facing here needs Ray, TransferQueue and inference servers; on a CPU it runs through verl's
real trainer with the CPU rollout server (`repro.verl_plugin.cpu_rollout`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any

import ray
import torch
import transfer_queue as tq
from tensordict import NonTensorData, NonTensorStack, TensorDict
from verl.experimental.agent_loop import get_trajectory_info
from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopManagerTQ, AgentLoopWorkerTQ

from repro.rundir import MetricsWriter, sampler_file
from repro.sampling.metrics import GENERATED
from repro.sampling.policies import policy_for
from repro.sampling.spec import SamplerSpec
from repro.verl_plugin import audit, pool_stats, state
from repro.verl_plugin.abortable import INFLIGHT, abort
from repro.verl_plugin.ada_loop import Sample, _gather_or_cancel, run_adaptive_step
from repro.verl_plugin.refill import RefillStream, load_records, plan_dapo_commit, slot_keys
from repro.verl_plugin.stop_trainer import VERL_MODES

logger = logging.getLogger(__name__)
_COLLECT = contextvars.ContextVar("reinforce_ada_collect", default=False)


def batch_rows(batch: TensorDict) -> list[dict[str, Any]]:
    """One dict per prompt, unpacked the way verl's worker unpacks a TensorDict batch."""
    rows = []
    for i in range(len(batch)):
        row = {}
        for key, value in batch.items():
            if isinstance(value, torch.Tensor):
                row[key] = value[i]
            elif isinstance(value, NonTensorStack):
                row[key] = value[i].data
            elif isinstance(value, NonTensorData):
                row[key] = value.data
        rows.append(row)
    return rows


COLOCATED_REWARD = (
    "Reinforce-Ada needs each response's reward while it samples, but with a colocated reward model "
    "(reward.reward_model.enable=True and reward.reward_model.enable_resource_pool=False) verl scores the "
    "responses only after the rollout, in the trainer. Give the reward model its own resource pool "
    "(reward.reward_model.enable_resource_pool=True) or use a rule-based reward (the project's compute_score)."
)


def check_reward_during_rollout(config: Any) -> None:
    """Refuse a reward that verl computes only after the rollout (verl 0.9.1's `RewardLoopManager.
    reward_loop_worker_handles` is None exactly then, and the agent loop leaves `reward_score` None)."""
    reward_model = config.reward.reward_model
    if reward_model.enable and not reward_model.enable_resource_pool:
        raise ValueError(COLOCATED_REWARD)


def resumed(outputs: list[Any]) -> bool:
    """Whether one agent-loop run was sampled across weight versions (verl's FullyAsyncLLMServerClient records
    the first and last version a resumed request saw in `extra_fields`)."""
    fields = getattr(outputs[-1], "extra_fields", None) or {}
    low, high = fields.get("min_global_steps"), fields.get("max_global_steps")
    return low is not None and high is not None and high > low


def response_tokens(outputs: list[Any]) -> int:
    """Tokens the model generated in one agent-loop run (`response_mask` 1; tool tokens are 0): what the
    bench's matched-compute comparison counts (repro.report: accuracy at equal generated tokens)."""
    return sum(int(sum(output.response_mask)) for output in outputs)


def response_reward(outputs: list[Any]) -> float:
    """The reward of one agent-loop run: verl's reward loop sets it on the run's last output
    (`AgentLoopWorker._compute_score`), the rest of the result going to `extra_fields["reward_extra_info"]`."""
    score = outputs[-1].reward_score
    if score is None:
        raise RuntimeError(f"an agent-loop output has no reward_score. {COLOCATED_REWARD}")
    return float(score)


class AdaWorker(AgentLoopWorkerTQ.__ray_actor_class__):
    """verl's TransferQueue worker plus three calls: begin a prompt, draw more, publish the kept ones."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ada: dict[str, dict[str, Any]] = {}

    async def _agent_loop_postprocess(self, output, validate, **kwargs):
        if not _COLLECT.get():
            return await super()._agent_loop_postprocess(output, validate, **kwargs)
        outputs = output if isinstance(output, list) else [output]
        await self._compute_score(outputs, kwargs=kwargs)  # verl's reward path: our custom compute_score
        return outputs

    async def ada_begin(self, rows: list[dict[str, Any]], global_steps: int) -> None:
        config = self.config.actor_rollout_ref.rollout
        params = dict(
            temperature=config.temperature,
            top_p=config.top_p,
            top_k=config.top_k,
            repetition_penalty=1.0,
            logprobs=config.calculate_log_probs,
        )
        infos = await get_trajectory_info(global_steps, [r.get("index", i) for i, r in enumerate(rows)], False)
        for row, info in zip(rows, infos, strict=True):
            if "agent_name" not in row:
                row["agent_name"] = config.agent.default_agent_loop
            self._ada[row["uid"]] = {"row": row, "trajectory": info, "params": params, "outputs": []}
            await tq.async_kv_put(key=row["uid"], partition_id="train", tag={"status": "running"})

    async def ada_generate(self, uid: str, count: int) -> list[float]:
        entry = self._ada[uid]
        start = len(entry["outputs"])

        async def one(session: int):
            return await self._session(entry, session)

        # one failed run cancels its siblings and keeps nothing: the manager's loop retries the batch
        # (`ada_loop.GENERATE_RETRIES`) from the same session numbers, then gives up on the prompt
        results = await _gather_or_cancel(one(start + k) for k in range(count))
        rewards = [response_reward(r) for r in results]
        entry["outputs"].extend(results)
        return rewards

    # ---- the early exit (issue 46): a batch response by response (`ada_loop.Streamed`) ----------------
    async def ada_start(self, uid: str, count: int) -> None:
        """Start a batch of `count` sessions and return: `ada_wait` reports them as they end."""
        entry = self._ada[uid]
        start, back = len(entry["outputs"]) + len(entry.setdefault("spent", [])), asyncio.Event()
        records: list[dict[str, Any]] = [{} for _ in range(count)]

        async def one(position: int):
            INFLIGHT.set(records[position])  # the session's server and request id (repro.verl_plugin.abortable)
            return await self._session(entry, start + position)

        tasks = [asyncio.ensure_future(one(k)) for k in range(count)]
        for task in tasks:
            task.add_done_callback(lambda _task: back.set())
        entry["batch"] = {"tasks": tasks, "records": records, "back": back, "told": set(), "aborted": set()}

    async def ada_wait(self, uid: str) -> list[tuple[int, float]]:
        """Every session of the batch that ended since the last call (at least one), with its reward."""
        batch = self._ada[uid]["batch"]
        while True:
            ended = [k for k, task in enumerate(batch["tasks"]) if task.done() and k not in batch["told"]]
            if ended:
                break
            batch["back"].clear()
            await batch["back"].wait()
        batch["told"].update(ended)
        return [(k, response_reward(batch["tasks"][k].result())) for k in ended]

    async def ada_cancel(self, uid: str, positions: list[int]) -> None:
        """Abort the server requests of these sessions and let them end on what they decoded (never published)."""
        batch = self._ada[uid]["batch"]
        flags = await asyncio.gather(*(abort(batch["records"][k], batch["tasks"][k]) for k in positions))
        batch["aborted"].update(k for k, flag in zip(positions, flags, strict=True) if flag)
        await asyncio.gather(*(batch["tasks"][k] for k in positions), return_exceptions=True)

    async def ada_end(self, uid: str, kept: list[int]) -> dict[str, int]:
        """The batch's kept sessions join the prompt's pool in this order; the others are spent (their tokens
        counted, never published). Returns the requests aborted in flight and the tokens they had decoded."""
        entry = self._ada[uid]
        batch = entry.pop("batch")
        outputs = [task.result() if task.done() and not task.exception() else None for task in batch["tasks"]]
        entry["outputs"].extend(outputs[k] for k in kept)
        entry["spent"].extend(o for k, o in enumerate(outputs) if k not in set(kept) and o is not None)
        aborted = [outputs[k] for k in batch["aborted"] if outputs[k] is not None]
        return {"aborted": len(batch["aborted"]), "aborted_tokens": sum(response_tokens(o) for o in aborted)}

    async def _session(self, entry: dict[str, Any], session: int):
        """One agent-loop run of a prompt, its output kept by this worker (`_COLLECT`), not published."""
        _COLLECT.set(True)
        return await self._run_agent_loop(
            entry["params"], trajectory=entry["trajectory"], trace=False, session_id=session, **entry["row"]
        )

    async def ada_count(self, uid: str, keep: list[int]) -> dict[str, int]:
        """What a prompt's metrics need before it is published: how many of its responses were sampled across a
        weight update (cut by an abort of verl's async trainer and resumed by its client on the new weights),
        the tokens its responses generated (the early exit's spent ones too), and those the kept ones bring to
        the update."""
        entry = self._ada.get(uid, {})
        outputs = entry.get("outputs", [])
        return {
            "resumed": sum(resumed(output) for output in outputs),
            "generated": sum(response_tokens(output) for output in [*outputs, *entry.get("spent", [])]),
            "trained": sum(response_tokens(outputs[index]) for index in keep),
        }

    async def ada_commit(self, uid: str, keep: list[int], ok: bool = True) -> None:
        """Publish the kept responses (verl's replay buffer may train on them from here on)."""
        entry = self._ada.pop(uid)
        try:
            for j, index in enumerate(keep):
                await AgentLoopWorkerTQ.__ray_actor_class__._agent_loop_postprocess(
                    self, entry["outputs"][index], False, **{**entry["row"], "session_id": j}
                )
            status = "finished" if ok else "failure"
        except Exception:
            logger.exception("publishing the update group of %s failed", uid)
            status = "failure"
        await tq.async_kv_put(key=uid, partition_id="train", tag={"status": status})

    async def ada_begin_refill(self, rows: list[dict[str, Any]], global_steps: int) -> None:
        """DAPO: begin refill prompts, first registering each as the trainer registers its own prompts."""
        for row in rows:
            tag = {"is_prompt": True, "status": "pending", "global_steps": global_steps}
            await tq.async_kv_put(key=row["uid"], partition_id="train", tag=tag)
        await self.ada_begin(rows, global_steps)

    async def ada_drop(self, uid: str) -> None:
        """DAPO: forget a dropped prompt and clear its prompt key, so verl's replay buffer never sees it."""
        self._ada.pop(uid, None)
        await tq.async_kv_clear(keys=[uid], partition_id="train")


class _Streamed:
    """`ada_loop.Streamed` over the workers that own the prompts: each call is the owner's `ada_*`."""

    def __init__(self, uids: list[str], owner: dict) -> None:
        self.uids, self.owner = uids, owner
        self.aborted = self.aborted_tokens = 0

    async def start(self, slot: int, count: int) -> None:
        await self.owner[self.uids[slot]].ada_start.remote(self.uids[slot], count)

    async def wait(self, slot: int) -> list[tuple[int, float]]:
        return [tuple(item) for item in await self.owner[self.uids[slot]].ada_wait.remote(self.uids[slot])]

    async def cancel(self, slot: int, positions: list[int]) -> None:
        await self.owner[self.uids[slot]].ada_cancel.remote(self.uids[slot], positions)

    async def end(self, slot: int, kept: list[int]) -> None:
        counts = await self.owner[self.uids[slot]].ada_end.remote(self.uids[slot], kept)
        self.aborted += counts["aborted"]
        self.aborted_tokens += counts["aborted_tokens"]


def _log_failure(future: concurrent.futures.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("an async Reinforce-Ada step failed", exc_info=future.exception())


class ReinforceAdaAgentLoopManager(AgentLoopManagerTQ):
    asynchronous = False  # the sync trainer's defaults (the constructor reads the trainer mode)
    _keep_steps: int | None = 2  # steps of pool statistics kept behind the newest batch

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        check_reward_during_rollout(self.config)
        if self.reward_loop_worker_handles is None:  # verl would score only after the rollout
            raise ValueError(f"verl gave the agent-loop manager no reward loop workers. {COLOCATED_REWARD}")
        self.agent_loop_workers_class = ray.remote(AdaWorker)
        self.spec = SamplerSpec.from_dict(dict(self.config.algorithm.reinforce_ada))
        checkpoints = Path(self.config.trainer.default_local_dir)
        if self.config.trainer.resume_mode != "disable" and policy_for(self.spec).keeps_estimator:
            trainer = self.config.trainer  # the very checkpoint verl resumes from (tracker file or resume_from_path)
            restored = state.restore(checkpoints, trainer.resume_mode, trainer.get("resume_from_path"), self.spec)
            logger.info("Reinforce-Ada estimator restored from step %s", restored)
            audit.append("est", {"restored_step": restored})
        self._sampler_log = None
        mode = str(self.config.trainer.v1.trainer_mode)  # ours (repro_sync, ...) or verl's own name
        self.asynchronous = VERL_MODES.get(mode, mode) != "sync"
        threshold = self.config.trainer.v1.sampler.get("max_off_policy_threshold", None)
        # a prompt drawn at step s is trained by step s + threshold - 1 at the latest (verl's replay buffer);
        # unbounded (null) keeps every pool until the run ends
        self._keep_steps = 2 if not self.asynchronous else None if threshold is None else max(2, int(threshold))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._batches: list[list[float]] = []  # async: [start, end] wall times of each submitted batch
        self._log_next = 1  # async: the first step no submitted batch covers yet
        if self.asynchronous and self.config.trainer.resume_mode != "disable":
            trainer = self.config.trainer
            count = state.restore_pool_stats(checkpoints, trainer.resume_mode, trainer.get("resume_from_path"))
            logger.info("Reinforce-Ada pool statistics restored: %s", count)
            audit.append("pool_stats", {"restored": count})

    def generate_sequences(self, prompts: TensorDict) -> None:
        if "validate" in prompts and bool(prompts["validate"]):
            return super().generate_sequences(prompts)
        if self.asynchronous:
            return self._submit(prompts)
        # a private event loop in a helper thread: works whether or not verl's caller already runs a loop
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self._generate_adaptive(prompts)).result()

    def _submit(self, prompts: TensorDict) -> None:
        """Async trainers: start the batch's adaptive step on the manager's own loop and return (verl's replay
        buffer waits for the prompts to finish). A failed step publishes its prompts as failures itself."""
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
            threading.Thread(target=self._loop.run_forever, name="reinforce-ada-loop", daemon=True).start()
        rows = batch_rows(prompts)
        rows_step = int(rows[0].get("global_steps", 0)) if rows else 0
        # A submission's sampler metrics go under the first step that trains it. verl's first submission holds
        # the warm-up batches too (2 x train_batch_size prompts, all tagged step 1), trained at steps 1 and 2,
        # so the next one is step 3's: a submission covers len(rows) / train_batch_size steps. Its metrics are
        # logged once, at its first step (a step it covers after the first has no sampler line of its own).
        per_step = int(self.config.data.get("train_batch_size") or len(rows) or 1)
        log_step = max(rows_step, self._log_next)
        self._log_next = log_step + max(1, len(rows) // per_step)
        self._batches.append([time.monotonic(), float("nan")])
        future = asyncio.run_coroutine_threadsafe(
            self._generate_adaptive(prompts, log_step=log_step, batch=len(self._batches) - 1), self._loop
        )
        future.add_done_callback(_log_failure)

    def _overlap(self, batch: int) -> dict[str, float]:
        """Async metrics of a finished batch: its sampling wall time, and the part of it that ran while the
        batch before it was still sampling (sampling a synchronous trainer would have done after that batch)."""
        start, end = self._batches[batch]
        metrics = {"async/gen_s": end - start, "async/overlap_s": 0.0}
        if batch > 0:
            prev_start, prev_end = self._batches[batch - 1]
            prev_end = end if math.isnan(prev_end) else prev_end  # NaN: the previous batch is still sampling
            metrics["async/overlap_s"] = max(0.0, min(end, prev_end) - max(start, prev_start))
        return metrics

    async def _generate_adaptive(self, prompts: TensorDict, log_step: int | None = None, batch: int = -1) -> None:
        rows = batch_rows(prompts)
        step = int(rows[0].get("global_steps", 0)) if rows else 0
        workers = self.agent_loop_workers
        owner = {row["uid"]: workers[i % len(workers)] for i, row in enumerate(rows)}
        chunks: dict[int, list[dict]] = {}
        for i, row in enumerate(rows):
            chunks.setdefault(i % len(workers), []).append(row)
        await asyncio.gather(*(workers[w].ada_begin.remote(chunk, step) for w, chunk in chunks.items()))
        uids = [row["uid"] for row in rows]
        prompt_keys = [str(row.get("index", row["uid"])) for row in rows]

        async def generate(slot: int, count: int) -> list[Sample]:
            rewards = await owner[uids[slot]].ada_generate.remote(uids[slot], count)
            return [Sample(reward=r, payload=None) for r in rewards]

        dapo = policy_for(self.spec).refills
        refill = self._dapo_refill(rows, step, uids, owner) if dapo else None
        streamed = _Streamed(uids, owner) if self.spec.early_exit != "off" else None
        try:
            result = await run_adaptive_step(
                self.spec, prompt_keys, generate, step=step, estimator=state.estimator(self.spec), refill=refill,
                streamed=streamed,
            )  # fmt: skip
            if streamed is not None:  # requests the servers still had when cancelled, and what they had decoded
                result.metrics["exit/requests_aborted"] = float(streamed.aborted)
                result.metrics["exit/tokens_cancelled"] = float(streamed.aborted_tokens)
            commit = plan_dapo_commit(result.result.included, len(rows), len(rows)) if dapo else None
        except Exception:
            await asyncio.gather(*(owner[u].ada_commit.remote(u, [], False) for u in uids))
            raise
        if commit is not None:
            kept = {s: list(result.kept_index[s]) for s in commit.publish}
            every = [*commit.publish, *commit.fill, *commit.drop]
            counts = await asyncio.gather(*(owner[uids[s]].ada_count.remote(uids[s], kept.get(s, [])) for s in every))
            self._finish(step, result.metrics, log_step, batch, counts)  # logged before verl can train the batch
            await asyncio.gather(
                *(owner[uids[s]].ada_commit.remote(uids[s], kept[s]) for s in commit.publish),
                *(owner[uids[s]].ada_commit.remote(uids[s], []) for s in commit.fill),
                *(owner[uids[s]].ada_drop.remote(uids[s]) for s in commit.drop),
            )
            return
        core = result.result
        # A = (r - baseline) * scale: the pool mean and Est's weight, or a bench family's own (repro.sampling.policies)
        baseline = result.pool_mean if core.baseline is None else {s: float(b) for s, b in enumerate(core.baseline)}
        scale = result.weight if core.scale is None else {s: float(w) for s, w in enumerate(core.scale)}
        pool_stats.record(  # a failed prompt (generation kept failing) has no rows, so no statistics
            {
                uids[s]: pool_stats.PoolStat(baseline[s], result.pool_size[s], scale[s], result.pool_std[s], step)
                for s in range(len(uids))
                if s not in result.failed
            }
        )
        if self._keep_steps is not None:
            pool_stats.forget_before(step - self._keep_steps)
        keep = [list(result.kept_index.get(s, [])) if s not in result.failed else [] for s in range(len(uids))]
        counts = await asyncio.gather(*(owner[uid].ada_count.remote(uid, k) for uid, k in zip(uids, keep, strict=True)))
        self._finish(step, result.metrics, log_step, batch, counts)  # logged before verl can train the batch
        await asyncio.gather(  # a failed prompt is published as verl's worker does: "failure", no rows
            *(owner[uids[s]].ada_commit.remote(uids[s], keep[s], s not in result.failed) for s in range(len(uids)))
        )

    def _finish(
        self, step: int, metrics: dict[str, float], log_step: int | None, batch: int, counts: list[dict[str, int]]
    ) -> None:
        """Log the step's sampler metrics with its tokens (`counts`: each prompt's `ada_count`). Called before the
        batch's prompts are published: once they are, verl may train the batch and, at the last step, end the
        process before this thread would log."""
        counts = [c or {} for c in counts]
        metrics = {
            **metrics,
            GENERATED: float(sum(c.get("generated", 0) for c in counts)),
            "tokens/trained": float(sum(c.get("trained", 0) for c in counts)),
        }
        if batch >= 0:  # async: overlap, and the responses an abort cut and verl's client resumed
            self._batches[batch][1] = time.monotonic()
            resumed = sum(c.get("resumed", 0) for c in counts)
            metrics = {**metrics, **self._overlap(batch), "async/resumed_responses": float(resumed)}
        self._log(step if log_step is None else log_step, metrics)

    def _dapo_refill(self, rows: list[dict], step: int, uids: list[str], owner: dict):
        """DAPO's `refill(count)` for this step: rows from the manager's stream, begun on the workers.

        The new uids are appended to `uids` (slot order) and `owner`, which `generate` reads.
        """
        workers = self.agent_loop_workers
        data = self.config.data
        stream: RefillStream | None = None

        async def refill(count: int) -> list:
            nonlocal stream
            if stream is None:
                stream = RefillStream(
                    self._dapo_train_records(),
                    seed=data.get("seed", None),
                    step=step,
                    exclude=[row.get("index") for row in rows],
                    prompt_key=data.get("prompt_key", "prompt"),
                )
            fresh = stream.draw(count)
            chunks: dict[int, list[dict]] = {}
            for j, row in enumerate(fresh):
                w = (len(uids) + j) % len(workers)
                owner[row["uid"]] = workers[w]
                chunks.setdefault(w, []).append(row)
            await asyncio.gather(*(workers[w].ada_begin_refill.remote(chunk, step) for w, chunk in chunks.items()))
            uids.extend(row["uid"] for row in fresh)
            return slot_keys(fresh)

        return refill

    def _dapo_train_records(self) -> list[dict]:
        """`data.train_files` read once per process (the refill streams of every step draw from it)."""
        records = getattr(self, "_dapo_records", None)
        if records is None:
            records = self._dapo_records = load_records(self.config.data.train_files)
        return records

    def _log(self, step: int, metrics: dict[str, float]) -> None:
        """Sampler metrics beside verl's file log (verl's trainer owns its metrics dict)."""
        import os

        target = os.environ.get("VERL_FILE_LOGGER_PATH")
        if not target:
            return
        if self._sampler_log is None:
            path = Path(target)
            self._sampler_log = MetricsWriter(sampler_file(path))  # RunDir merges it into verl's steps
        self._sampler_log.log(step, metrics)
