"""The attention a verl cell's actor loads with, read from its trainer command, and the fallback a job takes
when its node cannot import flash-attn. The attempt wrapper applies the fallback on the node (it runs inside
every engine, below them), and the stack check, the node check and the preflight read the same key and
default (repro.stack_check), so both ends agree on what a cell asked for."""

from __future__ import annotations

from collections.abc import Sequence

from repro.overrides import override_values

ATTENTION_KEY = "actor_rollout_ref.model.override_config.attn_implementation"
VERL_DEFAULT_ATTENTION = "flash_attention_2"  # verl 0.9.1 workers/config/model.py
FALLBACK_ATTENTION = "sdpa"  # torch's own kernel: no extra package, same result, slower
# the module a verl trainer command runs: named here, a layer below the plugin, so that the launchers can find it in
# a trainer command (repro.verl_plugin.config_builder.ENTRY_MODULE is this name)
VERL_ENTRY_MODULE = "repro.verl_plugin.entry"


def attention_asked(overrides: Sequence[str]) -> tuple[str, bool]:
    """(the attention the cell asks for, whether explicitly): an override of the key is explicit; without one
    the cell takes verl's default."""
    value = override_values(overrides).get(ATTENTION_KEY)
    return (VERL_DEFAULT_ATTENTION, False) if value is None else (value.strip("'\""), True)


def attention_fallback(argv: Sequence[str]) -> tuple[list[str], dict[str, str] | None]:
    """The trainer command a job runs with, and the attention record for status.json. A GPU cell that did not
    ask for its attention explicitly and whose node cannot import flash-attn runs with sdpa instead of
    failing at actor start; everything else is left as it is (record None)."""
    from repro.gpu_stack import ATTENTION_PACKAGES, importable

    argv = list(argv)
    if VERL_ENTRY_MODULE not in argv:
        return argv, None  # not verl's trainer (a test's stand-in, a CPU trainer)
    if any(a.split("=", 1)[0] == "trainer.device" and a.endswith("=cpu") for a in argv):
        return argv, None  # a CPU rehearsal sets sdpa itself
    asked, explicit = attention_asked(argv)
    if explicit or asked not in ATTENTION_PACKAGES or importable(ATTENTION_PACKAGES[asked][0]):
        return argv, None
    import socket

    module = ATTENTION_PACKAGES[asked][0]
    record = {
        "asked": asked,
        "used": FALLBACK_ATTENTION,
        "why": f"`{module}` does not import on {socket.gethostname()} (slower, same result; --require-flash-attn "
        "makes this a failure)",
    }
    return [*argv, f"+{ATTENTION_KEY}={FALLBACK_ATTENTION}"], record
