"""A sweep's results do not depend on how many cells run at once: the main job's `--max-parallel` follows the
machine's cores, so a 16-core laptop and a 2-core CI machine must write the same numbers. Each cell gets one
pinned torch thread whatever its share of the cores (repro.arithmetic), which is what this checks end to end."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from repro.launch.local import run_local
from repro.rundir import cell_name
from repro.sweep import load_sweep

METHODS = ("grpo-n4", "seq-balance")  # a fixed group size and an adaptive one
ARGS = ["--steps", "2", "--batch", "8"]


def _sweep(tmp_path: Path) -> Path:
    path = tmp_path / "grid.yaml"
    path.write_text(
        f"name: grid\nbackbones: [tiny-arith]\nmethods: [{', '.join(METHODS)}]\nprompt_sets: [standard]\nseeds: [0]\n"
    )
    return path


def _computed(run: Path) -> dict[str, str]:
    """What a run computed: every checkpoint's weights by hash, and every logged step's numbers without the
    stage timings (the clock, not the computation)."""
    found = {
        str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(run.glob("checkpoints/*/model/model.safetensors"))
    }
    for path in sorted(run.glob("metrics/*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        for row in rows:
            row["data"] = {k: v for k, v in row["data"].items() if not k.startswith("timing_s/")}
        found[str(path.relative_to(run))] = json.dumps(rows, sort_keys=True)
    return found


def test_one_and_two_cells_at_a_time_write_the_same_results(tiny_env, tmp_path) -> None:
    sweep = load_sweep(_sweep(tmp_path))
    serial = run_local(sweep, tmp_path / "serial", max_parallel=1, extra_args=ARGS)
    parallel = run_local(sweep, tmp_path / "parallel", max_parallel=2, extra_args=ARGS)
    assert serial.ok and parallel.ok, (serial.outcomes, parallel.outcomes)
    for method in METHODS:
        name = cell_name("tiny-arith", method, "standard", 0)
        one, two = _computed(tmp_path / "serial" / name), _computed(tmp_path / "parallel" / name)
        assert "checkpoints/global_step_2/model/model.safetensors" in one, sorted(one)  # the final weights
        assert len(json.loads(one["metrics/attempt-001.jsonl"])) == 2  # and both logged steps
        assert one == two, {k for k in one.keys() | two.keys() if one.get(k) != two.get(k)}
