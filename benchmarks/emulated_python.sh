#!/usr/bin/env bash
# An interpreter that runs this checkout's .venv Python on another x86 CPU, emulated by qemu-user, children
# included: DIR/bin/python starts `qemu-x86_64 -cpu CPU` with argv[0] = itself, so sys.executable is the
# wrapper and every process `repro` starts (the trainer, the evaluation) is emulated too. DIR borrows the
# venv's pyvenv.cfg and lib/, so the installed packages and the editable repro are the same.
#
#   bash benchmarks/emulated_python.sh EPYC-v3 /tmp/epyc
#   /tmp/epyc/bin/python tests/arithmetic_probe.py /tmp/probe-home --light    # ~6 min; compare with native
#
# `qemu-x86_64 -cpu help` lists the CPUs (Debian's qemu-user: bash scripts/setup-debian.sh).
set -euo pipefail
cpu=${1:?usage: emulated_python.sh CPU DIR}
dir=${2:?usage: emulated_python.sh CPU DIR}
root=$(cd "$(dirname "$0")/.." && pwd)
real=$(readlink -f "$root/.venv/bin/python")
command -v qemu-x86_64 >/dev/null || { echo "emulated_python: qemu-x86_64 is missing: bash scripts/setup-debian.sh" >&2; exit 2; }
mkdir -p "$dir/bin"
cp "$root/.venv/pyvenv.cfg" "$dir/"
ln -sfn "$root/.venv/lib" "$dir/lib"
cat > "$dir/bin/python" <<WRAPPER
#!/bin/sh
exec qemu-x86_64 -cpu $cpu -0 $dir/bin/python $real "\$@"
WRAPPER
chmod +x "$dir/bin/python"
echo "$dir/bin/python: this venv's Python on an emulated $cpu"
