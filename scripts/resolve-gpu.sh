#!/usr/bin/env bash
# Show the GPU stack before a GPU-day: resolve `.[gpu]` with pip's own resolver under
# repro/catalog/gpu_constraints.txt, WITHOUT installing anything, print the versions pip would install,
# and say whether they equal verl 0.9.1's tested versions (read from the resolved verl's own metadata).
#   bash scripts/resolve-gpu.sh            # needs Python 3.11 and PyPI; takes about a minute
# pip resolves for the interpreter it runs under, so run it with the Python 3.11 of a Linux x86_64 machine
# (any: resolution reads metadata only; no CUDA and no GPU needed). Nothing in ./.venv is touched: the
# resolver runs in a throwaway venv under /tmp, which is removed on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "error: repro needs Python 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
constraints="repro/catalog/gpu_constraints.txt"
tmp="$(mktemp -d /tmp/repro-resolve-gpu.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)
"$python" -m venv "$tmp/venv"
# A current pip: --report needs pip >= 22.2, and recent pips read PyPI's separate metadata files
# (PEP 658) instead of downloading multi-GB CUDA wheels just to learn their dependencies.
if ! "$tmp/venv/bin/python" -m pip install --quiet --upgrade pip > "$tmp/pip.log" 2>&1; then
  cat "$tmp/pip.log" >&2
  echo "error: could not upgrade pip in the throwaway venv (is PyPI reachable?)" >&2
  exit 1
fi
if ! "$tmp/venv/bin/python" -m pip install --dry-run --ignore-installed --quiet \
    --report "$tmp/report.json" -c "$constraints" ".[gpu]" > "$tmp/resolve.log" 2>&1; then
  cat "$tmp/resolve.log" >&2
  echo "error: pip could not resolve .[gpu] under $constraints (log above)" >&2
  exit 1
fi
"$tmp/venv/bin/python" - "$tmp/report.json" "$constraints" "$(( $(date +%s) - start ))" <<'EOF'
"""Print what pip would install and compare it with verl 0.9.1's own pins and the constraints file."""
import json
import re
import sys

from pip._vendor.packaging.requirements import Requirement  # the packaging pip itself resolved with


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


report_path, constraints_path, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
items = json.load(open(report_path))["install"]
resolved = {norm(i["metadata"]["name"]): i["metadata"]["version"] for i in items}
verl_meta = next(i["metadata"] for i in items if norm(i["metadata"]["name"]) == "verl")

# verl's tested pins: its `vllm` extra (the rollout stack) and the flash-attn sub-extra of `fsdp`.
verl_pins: dict[str, str] = {}
for line in verl_meta.get("requires_dist", []):
    req = Requirement(line)
    for extra in ("vllm", "flash-attn-cu130torch211"):
        if req.marker is not None and req.marker.evaluate({"extra": extra}):
            pins = [s.version for s in req.specifier if s.operator == "=="]
            if pins:
                verl_pins[norm(req.name)] = pins[0]

tested: dict[str, str] = {}
for raw in open(constraints_path):
    line = raw.split("#", 1)[0].strip()
    if line:
        req = Requirement(line)
        tested[norm(req.name)] = next(s.version for s in req.specifier if s.operator == "==")

cuda = sorted(f"{n} {v}" for n, v in resolved.items() if n.startswith("nvidia-cuda-runtime"))
print(f"pip would install {len(items)} packages for .[gpu] -c {constraints_path} (resolved in {seconds}s):")
for name in ("vllm", "torch", "torchvision", "torchaudio", "transformers", "verl", "flash-attn"):
    got = resolved.get(name)
    if got is None and name == "flash-attn":
        got = "not in .[gpu] (PyPI has no wheel; scripts/setup-venv.sh gpu tries a prebuilt one)"
    print(f"  {name:<13} {got or 'not resolved'}")
print(f"  {'CUDA runtime':<13} {', '.join(cuda) or 'none'}")
mismatch = [
    f"{n} {resolved.get(n, 'missing')} (verl {verl_meta['version']} tested {v})"
    for n, v in sorted(verl_pins.items())
    if n != "flash-attn" and resolved.get(n) != v
]
drift = [f"{n}: constraints {tested.get(n)} vs verl {v}" for n, v in sorted(verl_pins.items()) if tested.get(n) != v]
if verl_meta["version"] == "0.9.1" and not mismatch and not drift:
    same = ", ".join(f"{n}=={v}" for n, v in sorted(verl_pins.items()) if n != "flash-attn")
    print(f"equal to verl 0.9.1's tested versions: yes ({same}; flash-attn=={verl_pins.get('flash-attn')} pinned alike)")
else:
    other = [] if verl_meta["version"] == "0.9.1" else [f"verl {verl_meta['version']} resolved, not 0.9.1"]
    print("equal to verl 0.9.1's tested versions: NO: " + "; ".join(mismatch + drift + other))
    sys.exit(1)
EOF
