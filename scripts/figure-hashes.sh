#!/usr/bin/env bash
# Render every figure the main job draws (and the reward curve's two readings) from a results folder into a
# scratch folder and print the SHA-256 of each file: run it before and after a change to the plotting code, on
# the same results, and diff the two.
#   bash scripts/figure-hashes.sh [RESULTS=results] [RUNS_ROOT=runs] > hashes.txt
set -euo pipefail
cd "$(dirname "$0")/.."
results=${1:-results}
runs=${2:-runs}
repro=.venv/bin/repro
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for figure in reward-curve reward-entropy heldout step-time sampling eval-curve accuracy-tokens ave-tokens schedules; do
  $repro plot "$figure" --results "$results" --out "$out/$figure" > /dev/null
done
for reward in pool selected; do
  $repro plot reward-curve --results "$results" --reward "$reward" --out "$out/reward-curve-$reward" > /dev/null
done
for figure in passk signal-loss; do
  $repro plot "$figure" --results "$results" --runs-root "$runs" --out "$out/$figure" > /dev/null
done
(cd "$out" && sha256sum -- *.png *.pdf)
