"""A scripted stand-in for verl's inference-server client, for tests and timing studies on CPU.

TEST DOUBLE. The real path needs a vLLM (or SGLang) server on a GPU, which cannot run here. verl's agent
loops reach that server only through `verl.workers.rollout.llm_server.LLMServerClient.generate` (verl
0.9.1): one call, one sample, returning `verl.workers.rollout.replica.TokenOutput`. `FakeLLMServer.generate`
has exactly that signature and returns that real `TokenOutput`, so code written against the fake runs
unchanged against `AgentLoopBase.server_manager`. What it does instead of sampling from a model:

- the response *text* comes from a script, `script(prompt_ids, call_index) -> str`, where `call_index`
  counts earlier calls for the same prompt (0, 1, 2, ...), or from a per-prompt list of texts used
  cyclically; the text is encoded with the given tokenizer and the eos token is appended, as vLLM
  includes the eos token it stopped on;
- `sampling_params["max_tokens"]` truncates the token ids (eos included in the count). Truncated
  responses get stop_reason `truncated_stop_reason` ("length" by default), complete ones "completed".
  Note that verl 0.9.1's own vLLM server maps vLLM's finish_reason "length" to "completed" too, so
  production code must not detect truncation from stop_reason alone (SGLang passes finish_reason on);
- `latency(prompt_ids, text) -> seconds` (optional) is awaited with asyncio.sleep, so schedules can be
  studied without a GPU; every call yields to the event loop at least once, as a real RPC does;
- or `serve(prompt_ids, call_index, token_ids)` (optional), an awaitable that returns when the response
  would be done: a shared server model (`repro.simulate.async_engine`) where requests compete for slots;
- every call is recorded (`calls`: request id, prompt ids, a copy of sampling_params, the extra keyword
  arguments, call index, text, stop reason, start/end times), calls are counted per prompt
  (`call_counts`), and the largest number of requests in flight at once is kept (`max_in_flight`).

Unlike the real vLLM server it never mutates the caller's sampling_params (the real one pops max_tokens
from the dict it receives; through Ray that is a copy, in-process it would not be).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from verl.workers.rollout.replica import TokenOutput

Script = Callable[[list[int], int], str]
Latency = Callable[[list[int], str], float]
Serve = Callable[[list[int], int, list[int]], Awaitable[None]]


@dataclass
class CallRecord:
    """One `generate` call as the fake saw it."""

    request_id: Any
    prompt_ids: list[int]
    sampling_params: dict[str, Any]
    extra_kwargs: dict[str, Any]
    call_index: int
    text: str = ""
    token_ids: list[int] = field(default_factory=list)
    stop_reason: str | None = None
    start: float = 0.0
    end: float = 0.0


class FakeLLMServer:
    """Mirrors `LLMServerClient.generate` (verl 0.9.1); see the module docstring for what is faked."""

    def __init__(
        self,
        tokenizer: Any,
        script: Script | Mapping[tuple[int, ...], Sequence[str]],
        *,
        latency: Latency | None = None,
        serve: Serve | None = None,
        truncated_stop_reason: str = "length",
        global_steps: int | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.tokenizer = tokenizer
        if callable(script):
            self._script: Script = script
        else:
            texts = {tuple(k): list(v) for k, v in script.items()}

            def _from_lists(prompt_ids: list[int], call_index: int) -> str:
                options = texts[tuple(prompt_ids)]
                return options[call_index % len(options)]

            self._script = _from_lists
        if latency is not None and serve is not None:
            raise ValueError("give latency or serve, not both")
        self.latency = latency
        self.serve = serve
        self.truncated_stop_reason = truncated_stop_reason
        self.global_steps = global_steps
        self.clock = clock
        self.eos_token_id = tokenizer.eos_token_id
        self.calls: list[CallRecord] = []
        self.call_counts: Counter[tuple[int, ...]] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0

    async def generate(
        self,
        request_id,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Optional[list[Any]] = None,  # noqa: UP045 - spelled as verl spells it
        video_data: Optional[list[Any]] = None,  # noqa: UP045
        audio_data: Optional[list[Any]] = None,  # noqa: UP045
        mm_processor_kwargs: Optional[dict[str, Any]] = None,  # noqa: UP045
        **kwargs: Any,
    ) -> TokenOutput:
        """One sampled response for `prompt_ids`, as `LLMServerClient.generate` returns it."""
        if not isinstance(prompt_ids, list) or not all(isinstance(t, int) for t in prompt_ids):
            raise TypeError(f"prompt_ids must be a list of Python ints, got {type(prompt_ids).__name__}")
        if not isinstance(sampling_params, dict):
            raise TypeError(f"sampling_params must be a dict, got {type(sampling_params).__name__}")
        key = tuple(prompt_ids)
        call_index = self.call_counts[key]
        self.call_counts[key] += 1
        extra = {
            "image_data": image_data,
            "video_data": video_data,
            "audio_data": audio_data,
            "mm_processor_kwargs": mm_processor_kwargs,
            **kwargs,
        }
        record = CallRecord(
            request_id=request_id,
            prompt_ids=list(prompt_ids),
            sampling_params=dict(sampling_params),
            extra_kwargs={k: v for k, v in extra.items() if v is not None},
            call_index=call_index,
            start=self.clock(),
        )
        self.calls.append(record)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            text = self._script(list(prompt_ids), call_index)
            full = [*self.tokenizer.encode(text, add_special_tokens=False), self.eos_token_id]
            max_tokens = sampling_params.get("max_tokens", sampling_params.get("max_new_tokens"))
            token_ids = full if max_tokens is None else full[: max(1, int(max_tokens))]
            stop_reason = "completed" if len(token_ids) == len(full) else self.truncated_stop_reason
            if self.serve is not None:
                await self.serve(list(prompt_ids), call_index, token_ids)
            else:
                delay = self.latency(list(prompt_ids), text) if self.latency is not None else 0.0
                await asyncio.sleep(max(0.0, float(delay)))
        finally:
            self.in_flight -= 1
        record.text, record.token_ids, record.stop_reason, record.end = text, token_ids, stop_reason, self.clock()
        log_probs = [0.0] * len(token_ids) if sampling_params.get("logprobs") else None  # placeholders
        steps = self.global_steps
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs,
            stop_reason=stop_reason,
            num_preempted=0,
            extra_fields={"global_steps": steps, "min_global_steps": steps, "max_global_steps": steps},
        )

    def calls_for(self, prompt_ids: Sequence[int]) -> list[CallRecord]:
        """The calls made for one prompt, in call order."""
        key = tuple(prompt_ids)
        return [c for c in self.calls if tuple(c.prompt_ids) == key]
