"""Cancelling one agent-loop session's server request by its id (the early exit on verl, issue 46).

verl 0.9.1's `LLMServerClient.generate` picks a server (`_acquire_server`) and sends vLLM a fresh request id per
turn (`_vllm_request_id`: a uuid unless `full_determinism`), so the caller never learns either. This client,
handed to the agent loops through verl's own hook (`get_client(client_cls=...)`, called by the trainer's
`get_llm_client`), writes both into the record of the session that runs it (a context variable the worker sets
in the session's task), and `abort` asks that server to abort that request: `vLLMHttpServer.abort_request`,
which ends vLLM's generator with finish reason "abort" and the tokens decoded so far (stop reason "aborted"),
so the session's agent loop finishes on a partial response, which the worker counts and never publishes.
Outside a session with a record, the client is verl's."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any

from verl.workers.rollout.llm_server import LLMServerClient

INFLIGHT: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("repro_inflight", default=None)
ABORT_TRIES = 20  # a request not yet registered in the engine is looked for again, this many times
ABORT_WAIT_S = 0.05


class AbortableLLMServerClient(LLMServerClient):
    async def _acquire_server(self, request_id: str, **extra):
        server_id, server = await super()._acquire_server(request_id, **extra)
        if (record := INFLIGHT.get()) is not None:
            record["server"] = server
        return server_id, server

    def _vllm_request_id(self, request_id: str) -> str:
        vllm_id = super()._vllm_request_id(request_id)
        if (record := INFLIGHT.get()) is not None:
            record["request_id"] = vllm_id
        return vllm_id


async def abort(record: dict[str, Any], done: asyncio.Future) -> bool:
    """Abort the request a session's record names; True when the engine still had it (cancelled mid-generation).
    A session whose request has not reached the engine yet is looked for again until it has or `done` is."""
    for _ in range(ABORT_TRIES):
        if done.done():
            return False
        server, request_id = record.get("server"), record.get("request_id")
        if server is not None and request_id is not None:
            try:
                call = server.abort_request
            except AttributeError:  # a server without it (the transformers stand-in): the response runs out
                return False
            result = await call.remote(request_id=request_id, reset_prefix_cache=False)
            if result.get("aborted"):
                return True
        await asyncio.sleep(ABORT_WAIT_S)
    return False
