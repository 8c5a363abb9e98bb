"""The FSDP workers' process-group timeout, from the cell's config: verl 0.9.1 creates the group with
`timeout_second=None` (workers/engine_workers.py), so torch's default applies (600 s for NCCL) and
`actor_rollout_ref.nccl_timeout` never reaches it. During a save rank 0 writes the gathered Hugging Face
weights alone while the other ranks wait at a collective; a 7B save at 50 MB/s outlasts 600 s and the job
dies mid-save. No verl setting reaches this call, so, as for the CPU platform's backend string
(repro.verl_plugin.cpu), the plugin wraps `initialize_global_process_group_ray` to pass the timeout the
config builder computed (REPRO_DIST_TIMEOUT_S in the Ray runtime env; repro.launch.allocation_end). An
explicit `timeout_second` from verl, or an unset variable, leaves verl's call as it is.
"""

from __future__ import annotations

import os
import sys

from repro.launch.allocation_end import DIST_TIMEOUT_ENV

_BOUND_IN = ("verl.workers.engine_workers",)  # modules that bound the name with `from ... import`


def timeout_from_env() -> int | None:
    raw = os.environ.get(DIST_TIMEOUT_ENV, "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def install() -> None:
    """Wrap verl's process-group initialiser once (wrapping whatever is there: the CPU platform's too)."""
    import verl.utils.distributed as distributed

    original = distributed.initialize_global_process_group_ray
    if getattr(original, "_repro_timeout", False):
        return

    def initialize_global_process_group_ray(timeout_second=None, backend=None):
        if timeout_second is None:
            timeout_second = timeout_from_env()
        return original(timeout_second=timeout_second, backend=backend)

    initialize_global_process_group_ray._repro_timeout = True  # type: ignore[attr-defined]
    for flag in ("_repro_cpu",):  # keep the CPU wrapper's marker visible to its own idempotence check
        if getattr(original, flag, False):
            setattr(initialize_global_process_group_ray, flag, True)
    distributed.initialize_global_process_group_ray = initialize_global_process_group_ray
    for name in _BOUND_IN:
        module = sys.modules.get(name)
        if module is not None and hasattr(module, "initialize_global_process_group_ray"):
            module.initialize_global_process_group_ray = initialize_global_process_group_ray


install()
