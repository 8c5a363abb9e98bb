"""The child process of test_arithmetic.py: builds a small tiny-arith model, trains a 2-step cell and evaluates
it, all under `repro`'s CPU arithmetic, and prints one hash of each product. Run as
`python tests/arithmetic_probe.py HOME`, with whatever kernel variables the test sets in its environment.

`--light` shrinks every stage (a 4-step build on 16 examples, a 1-step cell of 8 prompts, 2 problems
evaluated) for a CPU emulated by qemu-user, where the full probe takes hours (AVX2 is emulated instruction by
instruction, ~20x slower): `bash benchmarks/emulated_python.sh EPYC-v3 DIR`, then
`DIR/bin/python tests/arithmetic_probe.py HOME --light`, whose trainer and evaluation children are emulated too
(docs/cpu-miniature.md)."""

from __future__ import annotations

import sys

from repro import arithmetic

arithmetic.pin()  # first, as repro.cli does

import hashlib  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

TIMING = ("time", "seconds", "_s", "throughput", "per_s")  # metric names that hold wall-clock figures


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def _metrics(path: Path) -> str:
    """The run's logged metrics without the wall-clock ones (the only values a machine may change)."""
    lines = []
    for line in path.read_text().splitlines():
        record = json.loads(line)
        data = {k: v for k, v in record["data"].items() if not any(t in k for t in TIMING)}
        lines.append(json.dumps({"step": record["step"], "data": data}, sort_keys=True))
    return _digest("\n".join(lines).encode())


def main(home: Path, light: bool = False) -> None:
    import os

    import torch

    os.environ["REPRO_HOME"] = str(home)

    from repro.cli import main as cli
    from repro.cpu_lm.model import TinyModelSpec, ensure_tiny_model
    from repro.tasks.tiny_arith import ensure_data

    size = {"sft_steps": 4, "sft_batch": 16, "probe_problems": 8, "probe_samples": 4} if light else {"sft_steps": 40}
    model = ensure_tiny_model(home=home, spec=TinyModelSpec(unboxed_share=0.0, **size))
    ensure_data(0, home=home)
    runs = home / "runs"
    steps, problems = ("1", "2") if light else ("2", "6")
    assert cli(["run", "--model", "tiny-arith", "--method", "seq-balance", "--steps", steps, "--batch", "8",
                "--runs-root", str(runs)]) == 0  # fmt: skip
    run = runs / "tiny-arith__seq-balance__standard__s0"
    assert cli(["eval", str(run), "--benchmarks", "tiny-math500", "--first-problems", problems, "--k", "2",
                "--pass-k", "1"]) == 0  # fmt: skip
    final = sorted((run / "checkpoints").glob("global_step_*"))[-1]
    records = sorted((run / "eval").glob("*/tiny-math500.jsonl"))[-1]
    out = {
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        "model": _digest(b"".join(p.read_bytes() for p in sorted(model.glob("*.safetensors")))),
        "checkpoint": _digest(b"".join(p.read_bytes() for p in sorted(final.rglob("*.safetensors")))),
        "metrics": _metrics(run / "metrics" / "attempt-001.jsonl"),
        "eval": _digest(records.read_bytes()),
    }
    print("PROBE " + json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), light="--light" in sys.argv[2:])
