#!/usr/bin/env bash
# The Debian packages the test suite runs for real: a single-node Slurm (slurm-wlm + munge) for the Slurm
# launcher's tests (../shared/spec/LAUNCH.md; the tests start slurmctld/slurmd/munged with a private config and
# stop them by pid), and qemu-user, whose qemu-x86_64 runs the CPU arithmetic as an emulated AMD EPYC
# (tests/test_arithmetic.py). Needs root and Debian's package registry for what is missing; does nothing if
# every command is there.
set -euo pipefail
declare -A needs=([sbatch]=slurm-wlm [slurmctld]=slurm-wlm [munged]=munge [qemu-x86_64]=qemu-user)
missing=()
for command in "${!needs[@]}"; do
  command -v "$command" >/dev/null || missing+=("${needs[$command]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0
packages=$(printf '%s\n' "${missing[@]}" | sort -u | tr '\n' ' ')
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "setup-debian: missing ${packages}and this is not root on Debian; install them yourself" >&2
  exit 1
fi
started=$(date +%s)
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
# shellcheck disable=SC2086
apt-get install -y -qq $packages >/dev/null
echo "${packages}installed in $(( $(date +%s) - started ))s"
