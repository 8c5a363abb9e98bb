"""A transformers-backed rollout server for verl on a CPU: the stand-in for vLLM, on vLLM's interface.

The CPU rehearsal rolls out with real vLLM (`repro.verl_plugin.cpu_vllm`, rollout `vllm_cpu`); this server is
chosen with `actor_rollout_ref.rollout.name=cpu` and stays for what a real engine cannot do here: injected
request failures (`REPRO_CPU_ROLLOUT_FAULTS`, the retry test) and an environment without vLLM's CPU build.

verl's agent loop reaches inference only through a server actor's
`generate(prompt_ids, sampling_params, request_id, ...) -> TokenOutput`, and the trainer reaches the server
through a `RolloutReplica` (launch, wake/sleep, abort, kv-cache calls) and, inside each training worker, a
server adapter whose `update_weights` receives the actor's new weights after every update (the v1
trainers' `naive` checkpoint engine). This module implements those three pieces the way verl's vLLM
backend does, with the model run by transformers on the host:

- `CpuRolloutServer` (a Ray actor named `cpu_server_<replica>_0`): requests that arrive together are
  sampled in one left-padded batch with a KV cache (`repro.verl_plugin.cpu_sampling`: temperature, top-k,
  top-p, EOS from the generation config, log-probs of the sampled tokens under the temperature-scaled
  distribution), vLLM's `max_tokens` rules and stop reasons. It holds a version counter and a digest of its
  weights, so a test can see that every update arrived;
- `CpuServerAdapter`: consumes the weight generator on every rank (gathering FSDP shards is collective)
  and, on the replica's first rank, loads the tensors into the server, checking every name;
- `CpuReplica`: launches one server per replica.

`REPRO_CPU_ROLLOUT_DROP_UPDATES=1` makes the adapter discard weight updates: the control that shows
weight sync matters (the rollout drifts off-policy and `rollout_corr/kl` grows). `REPRO_CPU_ROLLOUT_FAULTS`
injects failed requests, to rehearse what a flaky server does to a step.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from verl.utils.config import omega_conf_to_dataclass
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutReplica, TokenOutput

from repro import arithmetic
from repro.verl_plugin import audit
from repro.verl_plugin.admission import admit
from repro.verl_plugin.cpu_sampling import SamplingKey, sample_batch
from repro.vllm_rules import read_model_config, verify_request

logger = logging.getLogger(__name__)

DROP_UPDATES_ENV = "REPRO_CPU_ROLLOUT_DROP_UPDATES"
# Fault injection, for rehearsing failures: `prompt` makes every request of the first prompt the server
# sees fail; `once` makes the first request of any other prompt fail once (comma-separated, both allowed).
FAULTS_ENV = "REPRO_CPU_ROLLOUT_FAULTS"
BATCH_WINDOW_S = 0.005  # how long the server waits for more requests before sampling a batch


def server_name(replica_rank: int, node_rank: int = 0) -> str:
    return f"cpu_server_{replica_rank}_{node_rank}"


@dataclass
class _Request:
    prompt_ids: list[int]
    max_tokens: int
    want_logprobs: bool
    future: asyncio.Future = field(repr=False)
    request_id: str = ""


def weights_digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


class CpuRolloutServer:
    """The server actor: vLLM's `vLLMHttpServer` methods that verl calls, over a transformers model."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int = 0) -> None:
        from transformers import AutoModelForCausalLM, GenerationConfig

        self.config = omega_conf_to_dataclass(config)
        self.model_config = model_config
        path = getattr(model_config, "local_path", None) or model_config.path
        threads = int(os.environ.get("REPRO_TORCH_THREADS", "1"))
        torch.set_num_threads(arithmetic.threads(max(1, threads)))
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
        eos: set[int] = set()
        try:
            generation = GenerationConfig.from_pretrained(path)
            ids = generation.eos_token_id
            eos.update([ids] if isinstance(ids, int) else list(ids or []))
        except OSError:
            pass
        if self.model.config.eos_token_id is not None:
            ids = self.model.config.eos_token_id
            eos.update([ids] if isinstance(ids, int) else list(ids))
        self.eos_ids = eos
        pad = self.model.config.pad_token_id
        self.pad_id = int(pad if pad is not None else min(eos) if eos else 0)
        # verl's vLLM server and vLLM itself decide the context, and refuse what they refuse, before a request
        checkpoint, tokenizer_config = read_model_config(path)
        self.max_model_len = admit(
            getattr(self.config, "max_model_len", None),
            int(self.config.prompt_length),
            int(self.config.response_length),
            checkpoint,
            dict(getattr(model_config, "override_config", None) or {}),
            tokenizer_config,
            whole_responses=False,
        ).max_model_len
        seed = int(getattr(self.config, "seed", 0) or 0) * 1000 + replica_rank
        self.generator = torch.Generator().manual_seed(seed)
        self.global_steps: int | None = None
        self.version = 0
        self.digests = [weights_digest(self.model)]
        self._init_requests()

    def _init_requests(self) -> None:
        """The request side's state: queue, batching worker, the pause gate, fault injection, counters."""
        self.requests_served = 0
        self._queue: dict[SamplingKey, list[_Request]] = {}
        self._wake = asyncio.Event()
        self._model_lock = asyncio.Lock()
        self._worker: asyncio.Task | None = None
        # vLLM's pause gate (verl's vLLMHttpServer.abort_all_requests / resume_generation): closed by an abort,
        # requests arriving behind it are parked until resume (or refused at once when the abort said
        # reject_request); `_stop` ends the batch being sampled, whose unfinished rows return as "aborted"
        self._paused = False
        self._rejecting = False
        self._resume = asyncio.Event()
        self._resume.set()
        self._stop = threading.Event()
        self._aborted_ids: set[str] = set()
        self.aborted_requests = 0  # requests answered "aborted" (queued or cut mid-response)
        self.resumed_requests = 0  # requests that came back under the id of an aborted one (verl's resume)
        self._faults = {f.strip() for f in os.environ.get(FAULTS_ENV, "").split(",") if f.strip()}
        self._doomed: tuple[int, ...] | None = None
        self._failed_once = False

    def _inject_fault(self, prompt: list[int]) -> None:
        key = tuple(prompt)
        if "prompt" in self._faults:
            self._doomed = self._doomed or key
            if key == self._doomed:
                audit.append("rollout", {"event": "fault", "kind": "prompt"})
                raise ConnectionError(f"{FAULTS_ENV}=prompt: this prompt's requests always fail")
        if "once" in self._faults and not self._failed_once:
            self._failed_once = True
            audit.append("rollout", {"event": "fault", "kind": "once"})
            raise ConnectionError(f"{FAULTS_ENV}=once: the first request fails once")

    # -- what the replica and verl's client call ------------------------------------------------------
    async def ready(self) -> str:
        audit.append("rollout", {"event": "start", "version": 0, "global_steps": None, "digest": self.digests[-1]})
        return self.digests[-1]

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        priority: int = 0,
        **kwargs: Any,
    ) -> TokenOutput:
        params = dict(sampling_params)
        prompt = [int(t) for t in prompt_ids]
        room = verify_request(len(prompt), None, self.max_model_len)  # verl's headroom rule, its message
        if "max_tokens" in params:
            max_tokens = int(params.pop("max_tokens"))
        elif "max_new_tokens" in params:
            max_tokens = int(params.pop("max_new_tokens"))
        else:
            max_tokens = min(
                self.config.response_length, self.config.prompt_length + self.config.response_length - len(prompt)
            )
        max_tokens = max(1, min(max_tokens, room))
        key = SamplingKey(
            float(params.get("temperature", 1.0)), int(params.get("top_k", -1) or -1), float(params.get("top_p", 1.0))
        )
        while self._paused:  # parked until resume_generation, as vLLM's server parks behind its gate
            if self._rejecting:
                return TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields=self._fields())
            await self._resume.wait()
        if request_id in self._aborted_ids:  # verl's FullyAsyncLLMServerClient resumes under the same id
            self._aborted_ids.discard(request_id)
            self.resumed_requests += 1
        if self._faults:
            self._inject_fault(prompt)
        loop = asyncio.get_running_loop()
        request = _Request(
            prompt, max_tokens, bool(params.get("logprobs", False)), loop.create_future(), str(request_id)
        )
        self._queue.setdefault(key, []).append(request)
        if self._worker is None or self._worker.done():
            self._worker = asyncio.create_task(self._serve())
        self._wake.set()
        return await request.future

    async def _serve(self) -> None:
        while True:
            await self._wake.wait()
            await asyncio.sleep(BATCH_WINDOW_S)
            self._wake.clear()
            while self._queue:
                key, requests = self._queue.popitem()
                cap = max(1, int(getattr(self.config, "max_num_seqs", 256) or 256))
                if len(requests) > cap:
                    self._queue[key] = requests[cap:]
                    requests = requests[:cap]
                try:
                    async with self._model_lock:
                        results = await asyncio.to_thread(
                            sample_batch,
                            self.model,
                            [r.prompt_ids for r in requests],
                            [r.max_tokens for r in requests],
                            key,
                            self.eos_ids,
                            self.pad_id,
                            self.generator,
                            True,
                            self._stop,
                        )
                        cut = self._stop.is_set()
                except Exception as exc:  # one failed batch fails its requests, not the server
                    for r in requests:
                        if not r.future.done():
                            r.future.set_exception(exc)
                    continue
                for r, (token_ids, logps, stopped) in zip(requests, results, strict=True):
                    aborted = cut and not stopped and len(token_ids) < r.max_tokens
                    if aborted:
                        self._note_aborted(r.request_id)
                    if not r.future.done():
                        r.future.set_result(
                            TokenOutput(
                                token_ids=token_ids,
                                log_probs=logps if r.want_logprobs else None,
                                # vLLM maps both "stop" and "length" to completed; a cut request is "aborted"
                                stop_reason="aborted" if aborted else "completed",
                                num_preempted=0,
                                extra_fields=self._fields(),
                            )
                        )
                self.requests_served += len(requests)

    def _fields(self) -> dict[str, Any]:
        steps = self.global_steps
        return {"global_steps": steps, "min_global_steps": steps, "max_global_steps": steps}

    async def update_weights(self, named_tensors: dict[str, torch.Tensor], global_steps: int | None = None) -> str:
        """Load the actor's new weights; every name must be one of the model's (a mismatch is an error)."""
        async with self._model_lock:
            state = self.model.state_dict()
            unknown = sorted(set(named_tensors) - set(state))
            if unknown:
                raise KeyError(f"weights the rollout model does not have: {unknown[:5]}")
            missing = sorted(set(state) - set(named_tensors) - _tied(self.model))
            if missing:
                raise KeyError(f"weight update lacks {missing[:5]}")
            with torch.no_grad():
                for name, tensor in named_tensors.items():
                    state[name].copy_(tensor.to(state[name].dtype))
            self.version += 1
            self.digests.append(weights_digest(self.model))
        if global_steps is not None:
            self.global_steps = global_steps
        audit.append(
            "rollout",
            {"event": "update", "version": self.version, "global_steps": global_steps, "digest": self.digests[-1]},
        )
        return self.digests[-1]

    async def stats(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "digests": list(self.digests),
            "requests": self.requests_served,
            "aborted": self.aborted_requests,
            "resumed": self.resumed_requests,
        }

    def _note_aborted(self, request_id: str) -> None:
        self.aborted_requests += 1
        if request_id:
            self._aborted_ids.add(request_id)

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None  # the cache lives only within one batch

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self._queue:
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """vLLM's pause: close the gate, answer every queued request "aborted" with no tokens, cut the batch
        being sampled (its unfinished requests return their partial responses, "aborted"), and return once
        nothing runs. The gate stays closed until `resume_generation`."""
        self._paused = True
        self._rejecting = bool(reject_request)
        self._resume.clear()
        before = self.aborted_requests
        ids = []
        for requests in self._queue.values():
            for r in requests:
                if not r.future.done():
                    self._note_aborted(r.request_id)
                    ids.append(r.request_id)
                    r.future.set_result(
                        TokenOutput(token_ids=[], log_probs=None, stop_reason="aborted", extra_fields=self._fields())
                    )
        self._queue.clear()
        self._stop.set()
        try:
            async with self._model_lock:  # the running batch, if any, returns at its next token
                pass
        finally:
            self._stop.clear()
        count = self.aborted_requests - before
        if count:
            audit.append("rollout", {"event": "abort", "aborted": count, "global_steps": self.global_steps})
        return {"aborted_count": count, "request_ids": ids}

    async def resume_generation(self) -> None:
        self._paused = False
        self._rejecting = False
        self._resume.set()

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


def _tied(model: torch.nn.Module) -> set[str]:
    """Weights that share storage with another (tied embeddings) need not be sent twice."""
    seen: dict[int, str] = {}
    tied = set()
    for name, tensor in model.state_dict(keep_vars=True).items():
        ptr = tensor.data_ptr()
        if ptr in seen:
            tied.add(name)
        else:
            seen[ptr] = name
    return tied


class CpuReplica(RolloutReplica):
    """One CPU rollout server per replica (tensor/data/pipeline parallel sizes 1)."""

    def rollout_worker_use_gpu(self) -> bool:
        return False

    async def launch_servers(self) -> None:
        name = server_name(self.replica_rank)
        server = (
            ray.remote(CpuRolloutServer)
            .options(name=name, max_concurrency=self.max_concurrency, num_cpus=0)
            .remote(config=self.config, model_config=self.model_config, replica_rank=self.replica_rank)
        )
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = name


class CpuServerAdapter(BaseRollout):
    """Lives in each training worker; forwards weight updates to its replica's server."""

    def __init__(self, config: Any, model_config: Any, device_mesh: Any, replica_rank: int = -1) -> None:
        super().__init__(config, model_config, device_mesh)
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self._has_server = rank % world == 0
        self.server_handle = None
        self.updates_sent = 0

    def _server(self):
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_name(self.replica_rank))
        return self.server_handle

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: int | None = None, wire_format: str = "named_tensors", **kw):
        if wire_format != "named_tensors":
            raise ValueError(f"the cpu rollout takes wire_format='named_tensors', got {wire_format!r}")
        start = time.perf_counter()
        named = {}
        async for name, tensor in _aiter(weights):  # every rank: gathering a sharded tensor is collective
            if self._has_server:
                full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
                named[name] = full.detach().to("cpu", copy=True)
        if not self._has_server:
            return
        if os.environ.get(DROP_UPDATES_ENV, "") == "1":
            logger.warning("%s=1: weight update of step %s dropped (control run)", DROP_UPDATES_ENV, global_steps)
            audit.append("rollout", {"event": "dropped", "global_steps": global_steps})
            await self._server().set_global_steps.remote(global_steps)
            return
        await self._server().update_weights.remote(named, global_steps)
        self.updates_sent += 1
        logger.info("cpu rollout: %d tensors synced in %.2fs", len(named), time.perf_counter() - start)


async def _aiter(weights):
    if hasattr(weights, "__aiter__"):
        async for item in weights:
            yield item
    else:
        for item in weights:
            yield item
