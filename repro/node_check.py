"""`python -m repro.node_check RUN_DIR`: a GPU job's first line, the stack check (repro.stack_check) on its node.

The job script states what the cell asks of a node (GPUs per node, the attention and whether it was asked
for explicitly: `node_check_argv`), so the line reads on its own; the disk figures come from the run's
config.yaml, written at submission, through the preflight's own estimate. A failure prints every check,
then one `error:` line with the first problem and its fix, and exits 2 before Ray or verl start.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from repro.launch.attention import VERL_DEFAULT_ATTENTION, attention_asked
from repro.overrides import override_values
from repro.stack_check import CellNeeds, failures, run_checks

MODULE = "repro.node_check"


def needs_of_run(run_dir: Path, *, gpus: int, attention: str, required: bool) -> CellNeeds:
    """A job's needs: what its script states (GPUs per node, attention), plus the disk figures from the run's
    config.yaml (written at submission; a dry run's script has none yet, and then the disk is not checked)."""
    import yaml

    config_file = Path(run_dir) / "config.yaml"
    one = whole = 0
    checkpoints = str(Path(run_dir) / "checkpoints")
    if config_file.is_file():
        config = yaml.safe_load(config_file.read_text()) or {}
        values = override_values(config.get("overrides") or [])
        checkpoints = values.get("trainer.default_local_dir", checkpoints).strip("'")
        one, whole = _disk_from_overrides(config)
    return CellNeeds(
        attention=attention,
        attention_required=required,
        gpus_per_node=gpus,
        checkpoints=checkpoints,
        one_save=one,
        whole_run=whole,
    )


def node_check_argv(run_dir: Path, overrides: Sequence[str], gpus_per_node: int) -> list[str]:
    """The job script's check line: the cell's needs spelled out, so the line reads on its own and runs
    before anything of verl is imported."""
    attention, explicit = attention_asked(overrides)
    argv = ["python", "-m", MODULE, str(run_dir), "--gpus", str(gpus_per_node), "--attention", attention]
    return [*argv, "--attention-required"] if explicit else argv


def _disk_from_overrides(config: dict[str, Any]) -> tuple[int, int]:
    """(bytes of one save, of the whole run's saves) through the preflight's own estimate, from the composed
    config; (0, 0) when it cannot be told (no parameter count)."""
    from repro import catalog
    from repro.verl_plugin.config_builder import compose
    from repro.verl_plugin.preflight import checkpoint_disk

    backbone = str(config.get("backbone") or str(config.get("cell", "")).split("__")[0])
    try:
        params = catalog.get_backbone(backbone).param_count
    except Exception:
        return 0, 0
    if not params:
        return 0, 0
    disk = checkpoint_disk(compose(list(config["overrides"])), params)
    return disk.per_save, disk.total


def main(args: Sequence[str] | None = None) -> int:
    """`python -m repro.node_check RUN_DIR` (a job's first line, on its node) or `--submission --json
    --needs JSON` (a scheduler's interpreter, asked by the submitting one)."""
    import argparse

    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=main.__doc__)
    parser.add_argument("run_dir", nargs="?", help="the GPU cell's run folder")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs the cell uses per node")
    parser.add_argument("--attention", default=VERL_DEFAULT_ATTENTION, help="the actor's attn_implementation")
    parser.add_argument("--attention-required", action="store_true", help="asked for explicitly: missing fails")
    parser.add_argument("--submission", action="store_true", help="the submission's checks (no CUDA needed)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON")
    parser.add_argument("--needs", help="the cell's needs as JSON (instead of RUN_DIR and its flags)")
    ns = parser.parse_args(args)
    from repro.errors import ReproError

    try:
        needs = (
            CellNeeds(**json.loads(ns.needs))
            if ns.needs
            else needs_of_run(
                Path(ns.run_dir or "."), gpus=ns.gpus, attention=ns.attention, required=ns.attention_required
            )
        )
        checks = run_checks(needs, on_node=not ns.submission)
    except (ReproError, OSError, ValueError, KeyError) as exc:
        print(f"error: the stack check could not read its cell: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        print(json.dumps([asdict(c) for c in checks]))
        return 0
    import socket

    print(f"repro: stack check on {socket.gethostname()} ({sys.executable})")
    for check in checks:
        print(f"repro:   {check.line()}")
    bad = failures(checks)
    if bad:
        more = f" (and {len(bad) - 1} more above)" if len(bad) > 1 else ""
        print(f"error: {bad[0].detail}{more}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
