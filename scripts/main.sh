#!/usr/bin/env bash
# The main job on the embedded CPU default. For now: the sampling statistics of every method at paper
# scale and the signal-loss curve, printed and written as JSON under results/simulate/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/repro simulate signal-loss --show 1,2,4,8,16,32,64,128,256 --out results/simulate/signal_loss.json
.venv/bin/repro simulate sampling --out results/simulate/sampling.json
