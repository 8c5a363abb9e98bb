#!/usr/bin/env bash
# Debian's single-node Slurm (slurm-wlm + munge) for the Slurm launcher's tests (../shared/spec/LAUNCH.md).
# Installs the packages only; the tests start slurmctld/slurmd/munged with a private config and stop them
# by pid. Needs root and Debian's package registry; does nothing if Slurm is already installed.
set -euo pipefail
if command -v sbatch >/dev/null && command -v slurmctld >/dev/null && command -v munged >/dev/null; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup-slurm: Slurm is missing and this is not root on Debian; install slurm-wlm and munge yourself" >&2
  exit 1
fi
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq slurm-wlm munge >/dev/null
echo "slurm-wlm and munge installed in $(( $(date +%s) - started ))s"
