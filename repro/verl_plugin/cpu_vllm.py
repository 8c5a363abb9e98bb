"""verl's own vLLM server on vLLM's CPU build: the CPU rehearsal's rollout, with only what a CPU forces changed.

Registered in verl's `RolloutReplicaRegistry` as `vllm_cpu` (by `repro.verl_plugin.cpu`, for CPU cells only;
GPU cells keep verl's stock `vllm` replica). Everything else is verl's: `vLLMReplica.launch_servers`,
`vLLMHttpServer` (vLLM's OpenAI server and `AsyncLLM` in the server actor, its engine and worker processes),
the agent loop's requests, abort/resume through vLLM's real pause, and weight sync through verl's
`ServerAdapter` and its bucketed shared-memory transfer (`BucketedWeightSender` -> the worker's
`update_weights_from_ipc`). The CPU differences, each with its reason:

- the worker extension (`CpuWorkerExtension`) loads each synced bucket by vLLM's layerwise reload: on a CPU,
  vLLM prepacks linear weights for oneDNN and empties `layer.weight`, so verl's plain `model.load_weights`
  fails there; `initialize_layerwise_reload`/`finalize_layerwise_reload` (what vLLM's own
  `reload_weights` does) rebuild each layer from checkpoint-format tensors and repack it. Buckets are copied
  out of the shared-memory buffer because a layer is processed only once all its tensors arrived, and
  verl's sender reuses that buffer for the next bucket; a tied output head is repacked after the reload
  (`_repack_tied_head`), which vLLM's reload leaves on its old packed weights;
- the server's engine processes get `repro.vllm_cpu.engine_env()` (KV-cache size, both cores), through the
  cpu platform's `rollout_env_vars`, which verl's `vLLMReplica` puts in the server's Ray runtime env;
- sleep mode off and the cache kept (`enable_sleep_mode`, `free_cache_engine`: vLLM refuses sleep mode on
  a CPU) and eager mode (`enforce_eager`: no torch.compile, a 2-5x faster engine start): rollout settings
  in `repro/catalog/cpu_resources.yaml`, with these reasons beside them.

`REPRO_CPU_ROLLOUT_DROP_UPDATES=1` (the stand-in's variable, `repro.verl_plugin.cpu_rollout`) makes the worker
receive every bucket after the engine's first sync and load none: the control run in which the rollout keeps
its first weights and `rollout_corr/kl` grows. The first sync is always loaded because verl starts vLLM on
dummy weights (`rollout.load_format: dummy`) and that sync is what puts the actor's weights in at all.
"""

from __future__ import annotations

import hashlib
import logging
import os

import ray
import torch
from verl.workers.rollout.vllm_rollout.utils import vLLMColocateWorkerExtension
from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer, vLLMReplica

from repro.verl_plugin import audit
from repro.vllm_cpu import ROLLOUT  # the registry name, and (verl's ServerAdapter) the server actors' prefix

logger = logging.getLogger(__name__)

DROP_UPDATES_ENV = "REPRO_CPU_ROLLOUT_DROP_UPDATES"


def _repack_tied_head(model: torch.nn.Module) -> None:
    """Rebuild the output head's CPU GEMM from its new weights when they are tied to the embedding.

    On a CPU, vLLM packs the head's weight into a oneDNN handle (`cpu_linear`) when it loads the model. A tied
    head receives no tensor of its own (its weight is the embedding's), so the layerwise reload never
    processes it: the embedding gets the new values, the head keeps computing logits with the packed copy of
    what the engine started with (verl starts it on dummy weights). Measured on SmolLM2-135M before this:
    greedy text was noise after a sync and `rollout_corr/kl` was 3.1 at step 1."""
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or not hasattr(head, "cpu_linear"):
        return
    if head.weight.data_ptr() == embed.weight.data_ptr():
        head.quant_method.process_weights_after_loading(head)


class CpuWorkerExtension(vLLMColocateWorkerExtension):
    """verl's worker extension with weight loading by vLLM's layerwise reload (see the module docstring)."""

    def update_weights_from_ipc(self, peft_config: dict | None = None, base_sync_done=False, use_shm: bool = False):
        from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightReceiver
        from verl.workers.rollout.vllm_rollout.weight_update_utils import apply_buffer_updates, split_buffer_updates
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload, initialize_layerwise_reload

        if peft_config:
            raise NotImplementedError("LoRA weight sync is not rehearsed on the CPU vLLM replica")
        self._repro_syncs = getattr(self, "_repro_syncs", 0) + 1
        drop = os.environ.get(DROP_UPDATES_ENV, "") == "1" and self._repro_syncs > 1
        model = self.model_runner.model
        handle = self._get_zmq_handle()
        receiver = BucketedWeightReceiver(zmq_handle=handle, device=torch.device("cpu"), use_shm=use_shm)
        counts = {"tensors": 0, "buffers": 0}
        digest = hashlib.sha1()

        def on_bucket(weights: list[tuple[str, torch.Tensor]], is_last: bool) -> None:
            counts["tensors"] += len(weights)
            if drop:
                return
            for name, tensor in weights:
                digest.update(name.encode())
                digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
            params, buffers, named_buffers = split_buffer_updates(model, [(n, t.clone()) for n, t in weights])
            if params:
                model.load_weights(params)
            counts["buffers"] += apply_buffer_updates(model, buffers, named_buffers=named_buffers) or 0

        if not drop:
            initialize_layerwise_reload(model)
        receiver.receive_weights(on_bucket_received=on_bucket)
        if not drop:
            finalize_layerwise_reload(model, self.model_runner.model_config)
            _repack_tied_head(model)
            self._repro_digest = digest.hexdigest()[:16]
        logger.info("weight sync: %d tensors received, %s", counts["tensors"], "dropped" if drop else "loaded")

    def repro_weights_digest(self) -> str:
        """A digest of the weights the engine serves: of the last synced tensors, or (before any sync) of the
        parameters it started with (vLLM's own layout, so comparable only with another start's digest)."""
        known = getattr(self, "_repro_digest", None)
        if known:
            return known
        digest = hashlib.sha1()
        for name, tensor in self.model_runner.model.named_parameters():
            digest.update(name.encode())
            digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
        return digest.hexdigest()[:16]


class CpuVllmHttpServer(vLLMHttpServer):
    """verl's vLLM server with the CPU worker extension; records each weight version it serves."""

    _syncs = 0

    def _get_worker_extension_cls(self) -> str:
        return f"{CpuWorkerExtension.__module__}.{CpuWorkerExtension.__qualname__}"

    async def _digest(self) -> str:
        return (await self.engine.collective_rpc("repro_weights_digest"))[0]

    async def launch_server(self, *args, **kwargs):
        await super().launch_server(*args, **kwargs)
        # the same audit records as the stand-in's (repro.verl_plugin.audit): what the engine started with
        audit.append("rollout", {"event": "start", "version": 0, "global_steps": None, "digest": await self._digest()})

    async def set_global_steps(self, global_steps: int):
        # called by verl's ServerAdapter right after every weight sync: the audit's record that one arrived
        self._syncs += 1
        if os.environ.get(DROP_UPDATES_ENV, "") == "1" and self._syncs > 1:
            logger.warning("%s=1: weight update of step %s dropped (control run)", DROP_UPDATES_ENV, global_steps)
            audit.append("rollout", {"event": "dropped", "global_steps": global_steps})
        else:
            record = {"event": "update", "version": self._syncs, "global_steps": global_steps}
            audit.append("rollout", {**record, "digest": await self._digest()})
        return await super().set_global_steps(global_steps)

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False):
        result = await super().abort_all_requests(reset_prefix_cache=reset_prefix_cache, reject_request=reject_request)
        if result.get("aborted_count", 0):  # logged only when it cut something, as the stand-in does
            record = {"event": "abort", "aborted": result["aborted_count"], "global_steps": self.global_steps}
            audit.append("rollout", record)
        return result

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True) -> dict:
        """One request aborted by the id the caller gave (the early exit, `repro.verl_plugin.abortable`).

        verl 0.9.1's looks the id up in the output processor's `request_states`, which vLLM keys by an internal
        id since 0.16 (the caller's plus a random suffix, vllm-project/vllm#27987), and calls `abort_requests`
        without its `internal` argument: it never finds a live request. vLLM's own `AsyncLLM.abort` takes the
        caller's (external) id; the request's generator then ends with finish reason "abort" and the tokens
        decoded so far, which verl's `generate` returns with stop reason "aborted". The prefix cache is kept."""
        live = self.node_rank == 0 and request_id in self.engine.output_processor.external_req_ids
        if live:
            await self.engine.abort(request_id)
            audit.append("rollout", {"event": "abort_request", "global_steps": self.global_steps})
        return {"aborted": live, "request_id": request_id}


class CpuVllmReplica(vLLMReplica):
    """verl's vLLM replica launching the CPU server class under the `vllm_cpu_` actor names."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(CpuVllmHttpServer)

    def _get_server_name_prefix(self) -> str:
        return f"{ROLLOUT}_"
