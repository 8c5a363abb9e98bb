"""Stage 1 of the main job (`scripts/main.sh`): the four `repro simulate` commands, timed one by one.

Each command runs as its own process, as the main job runs it, writing into a throwaway folder; the table
gives its wall-clock and CPU seconds (the CPU figure moves less when other work shares the machine) and
whether its JSON equals the committed one in results/simulate/ byte for byte, apart from the wall-clock
"seconds" each method records. With --baseline, the same command from a git revision of `repro/` runs just
before each one, so that the ratio compares runs made back to back under the same load.

    python benchmarks/bench_simulations.py                     # about a minute on 2 idle cores
    python benchmarks/bench_simulations.py --baseline HEAD~3   # and each command at that revision too
    python benchmarks/bench_simulations.py --only cost-steady --baseline HEAD~3
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = {  # as scripts/main.sh runs them
    "signal_loss": ["signal-loss", "--show", "1,2,4,8,16,32,64,128,256"],
    "sampling": ["sampling"],
    "cost": ["cost"],
    "cost-steady": ["cost", "--methods", "grpo-n4,seq-pos,seq-balance", "--steps", "24"],
}
SECONDS = re.compile(r'"seconds": [0-9.e+-]+')


def run(name: str, out: Path, source: Path | None) -> tuple[float, float]:
    """(wall, CPU) seconds of one command; `source`: a folder holding another `repro` package to run."""
    env = dict(os.environ)
    if source is not None:  # `python -m` puts its working folder first on the path: run from the other tree
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
        # which repro the baseline imports, checked before the clock starts
        origin = subprocess.run(
            [sys.executable, "-c", "import repro; print(repro.__file__)"], cwd=source, env=env,
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        if not origin.startswith(str(source)):
            raise RuntimeError(f"the baseline ran {origin}, not the tree under {source}")
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "repro.cli", "simulate", *COMMANDS[name], "--out", str(out)],
        cwd=source or ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)


def same_as_committed(name: str, out: Path) -> str:
    committed = ROOT / "results" / "simulate" / f"{name}.json"
    if not committed.exists():
        return "no committed file"
    a, b = (SECONDS.sub('"seconds": _', p.read_text()) for p in (out, committed))
    return "identical" if a == b else "DIFFERENT"


def export(revision: str, into: Path) -> Path:
    """`repro/` as it was at `revision`, unpacked under `into`."""
    archive = into / "baseline.tar"
    subprocess.run(["git", "archive", "-o", str(archive), revision, "repro"], cwd=ROOT, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "baseline", filter="data")
    return into / "baseline"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(COMMANDS), help="comma-separated: " + ", ".join(COMMANDS))
    parser.add_argument("--baseline", help="a git revision whose repro/ runs each command first, for a ratio")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(COMMANDS))
    if unknown:
        parser.error(f"unknown commands {unknown}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        baseline = export(args.baseline, folder) if args.baseline else None
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        header = f"{'command':<12} {'wall s':>8} {'cpu s':>8}"
        if baseline:
            header += f" {'base wall':>10} {'base cpu':>9} {'cpu ratio':>9}"
        print(header + "  output vs results/simulate")
        totals = [0.0, 0.0, 0.0, 0.0]
        for name in names:
            base = run(name, folder / f"{name}.base.json", baseline) if baseline else None
            wall, cpu = run(name, folder / f"{name}.json", None)
            totals[0] += wall
            totals[1] += cpu
            line = f"{name:<12} {wall:8.1f} {cpu:8.1f}"
            if base:
                totals[2] += base[0]
                totals[3] += base[1]
                line += f" {base[0]:10.1f} {base[1]:9.1f} {base[1] / cpu:8.1f}x"
            verdict = same_as_committed(name, folder / f"{name}.json")
            if base:
                verdict += f" (baseline: {same_as_committed(name, folder / f'{name}.base.json')})"
            print(line + "  " + verdict, flush=True)
        line = f"{'total':<12} {totals[0]:8.1f} {totals[1]:8.1f}"
        if baseline:
            line += f" {totals[2]:10.1f} {totals[3]:9.1f} {totals[3] / totals[1]:8.1f}x"
        print(line)
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
