#!/usr/bin/env bash
# Create or update ./.venv with everything repro needs. Idempotent: re-runs only when pyproject.toml
# (or the requested extras) changed since the last successful install.
#   bash scripts/setup-venv.sh            # runtime only
#   bash scripts/setup-venv.sh dev        # + pytest, hypothesis, ruff
#   bash scripts/setup-venv.sh gpu        # + vLLM (GPU machines only)
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-}"
python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "error: repro needs Python 3.11; set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
[ -x .venv/bin/python ] || "$python" -m venv .venv
stamp=".venv/.repro-installed-${extras:-base}"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  exit 0
fi
start=$(date +%s)
log=".venv/install.log"
: > "$log"
pipi() {  # pip's and setuptools' chatter goes to the log; it is shown only when an install fails
  if ! .venv/bin/python -m pip install --quiet "$@" >> "$log" 2>&1; then
    cat "$log" >&2
    echo "error: pip install $* failed; the full log is in $log" >&2
    exit 1
  fi
}
pipi --upgrade pip
# torch first and exactly: on a CPU machine this is the local CPU wheel; left to the resolver, a range
# would pull a multi-GB CUDA build. GPU machines get the CUDA build of the same version from PyPI.
if ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  pipi "torch==2.13.0"
fi
spec="."
[ -n "$extras" ] && spec=".[${extras}]"
pipi -e "$spec"
echo "$want" > "$stamp"
echo "repro: environment ready in $(( $(date +%s) - start ))s (.venv, extras: ${extras:-none})" >&2
