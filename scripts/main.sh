#!/usr/bin/env bash
# The main job on the embedded CPU default: the CPU mini-reproduction of the paper, end to end.
#   1. paper-scale sampling statistics (`repro simulate`)                      -> results/simulate/
#   2. the tiny-arith model and its filtered "standard" and "hard" prompt sets -> $REPRO_HOME (first run only)
#   3. the grid: all seven methods x seeds 0-2 on the standard set (`sweeps/tiny.yaml`), GRPO-n4,
#      Seq-pos, Seq-balance x seeds 0-2 on the hard set (`sweeps/tiny-hard.yaml`), and beyond the paper
#      async Seq-balance, the released Est and the early exit x seeds 0-2 (`sweeps/tiny-beyond.yaml`), the bench of other
#      adaptive samplers, PODS, Knapsack RL and GRESO x seeds 0-2 (`sweeps/tiny-bench.yaml`), then the
#      compute-matched baselines, each comparison's lower-token side trained on to the other's tokens
#      (`sweeps/tiny-matched.yaml`), each cell evaluated by
#      the sweep's evaluation stage right after it trained: Ave@32 on the four tiny-arith tiers (the hard set
#      also at step 50, for the curve over training)                   -> runs/
#   4. Ave@32 of the base model                                                -> runs/tiny-arith/eval/
#   5. collect, the paper's tables beside the measured numbers, the figures,
#      and results/REPORT.md (one verdict per comparison the paper makes)     -> results/, paper_tables/generated/
# Every step is resumable: run it again after an interruption and only what is missing is done.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
bash scripts/setup-venv.sh
repro=.venv/bin/repro
runs=${REPRO_RUNS:-runs}
step() { echo; echo "== $* ($(( $(date +%s) - started ))s)"; }

# Stages 1 and 2 run side by side: building the tiny model (first run only) and sampling the filter's pass
# counts are one process each, and the simulations take the other cores (their output comes after stage 2's).
step "1/5 sampling statistics at paper scale (beside stage 2; its output follows)"
mkdir -p results/simulate
stage1_log=$(mktemp -t repro-stage1.XXXXXX)
(
  set -e
  $repro simulate signal-loss --show 1,2,4,8,16,32,64,128,256 --out results/simulate/signal_loss.json
  $repro simulate sampling --out results/simulate/sampling.json
  $repro simulate cost --out results/simulate/cost.json  # step time by schedule: sync, streamed, async
  # the async step a long run settles at (the mean gap between updates once the fill is over), for Table 2's methods
  $repro simulate cost --methods grpo-n4,seq-pos,seq-balance --steps 24 --out results/simulate/cost-steady.json
) > "$stage1_log" 2>&1 &
stage1=$!

step "2/5 the filtered standard and hard prompt sets (the tiny model: the shipped build, repro/cpu_lm/shipped)"
$repro data filter --base-samples 16
$repro data filter --base-samples 16 --pass-rate 0.125  # reuses the standard set's pass counts
stage1_ok=0
wait "$stage1" || stage1_ok=$?
step "1/5 done: its output"
cat "$stage1_log"
rm -f "$stage1_log"
if [ "$stage1_ok" != 0 ]; then echo "main job: stage 1 (the simulations) failed; see above" >&2; exit "$stage1_ok"; fi

# Each cell trains, then its evaluation stage (the sweep files' `eval:`) scores it. The four sweep files share one
# pool: one lane per CPU core, each lane going through all four files one cell at a time (one torch thread each),
# and a cell another lane holds is left to it (`repro sweep run` skips a cell whose launch lock is taken), so no
# core waits at the end of one file while another file has cells left. The sweep files ask for every kept
# checkpoint, as the paper's protocol does; on 2 cores the main job evaluates the final one (10 kept checkpoints a
# run would be 10x the evaluation time), and for the hard set also step 50, so `repro plot eval-curve` has
# a curve to draw: `repro sweep eval sweeps/tiny.yaml --eval-checkpoints all` adds the rest.
lanes=$(.venv/bin/python -c 'from repro.arithmetic import usable_cores; print(usable_cores())')
step "3/5 the grid and its evaluation: sweeps/tiny*.yaml, $lanes lanes (one per core)"
lane() {
  set -e
  if [ "${1:-}" = base ]; then $repro eval tiny-arith --runs-root "$runs" > "$lane_logs/base.log" 2>&1; fi
  $repro sweep run sweeps/tiny.yaml --runs-root "$runs" --max-parallel 1 --eval-checkpoints final
  $repro sweep run sweeps/tiny-hard.yaml --runs-root "$runs" --max-parallel 1 --eval-checkpoints 50,100
  # beyond the paper: async Seq-balance, the released Est and Seq-balance with the early exit, paired seed by seed
  # with sweeps/tiny.yaml's cells
  $repro sweep run sweeps/tiny-beyond.yaml --runs-root "$runs" --max-parallel 1 --eval-checkpoints final
  # the bench of other adaptive samplers (PODS, Knapsack RL, GRESO), paired with GRPO-n4, GRPO-n8 and DAPO there;
  # their equal-token readings come from the held-out accuracy every run logs while it trains
  $repro sweep run sweeps/tiny-bench.yaml --runs-root "$runs" --max-parallel 1 --eval-checkpoints final
  # the compute-matched baselines: per seed, the side of each comparison that generated fewer tokens by step 100
  # trains on from its last checkpoint to the other's total (those whose runs are not all finished yet wait for
  # the pass after the lanes); every kept checkpoint (each matched total, every fifth of the budget) evaluated
  $repro sweep run sweeps/tiny-matched.yaml --runs-root "$runs" --max-parallel 1
}
lane_logs=$(mktemp -d -t repro-lanes.XXXXXX)
lane_pids=()
lane &  # lane 1 shows its tables here; lanes 2.. write to a log each, shown if one fails
lane_pids+=($!)
for i in $(seq 2 "$lanes"); do
  if [ "$i" = "$lanes" ]; then lane base > "$lane_logs/lane$i.log" 2>&1 & else lane > "$lane_logs/lane$i.log" 2>&1 & fi
  lane_pids+=($!)
done
lanes_ok=0
for pid in "${lane_pids[@]}"; do wait "$pid" || lanes_ok=$?; done
if [ "$lanes_ok" != 0 ]; then  # a cell a lane ran failed (a lane skips only what another lane runs or has run)
  cat "$lane_logs"/*.log 2>/dev/null || true
  echo "main job: a cell of the grid failed (the lanes' tables above; repro status --sweep sweeps/tiny.yaml)" >&2
  exit "$lanes_ok"
fi
rm -rf "$lane_logs"
# the long runs that waited for a reference run another lane was finishing
$repro sweep run sweeps/tiny-matched.yaml --runs-root "$runs" --max-parallel "$lanes" | tail -2

step "4/5 Ave@32 of the base model (evaluated by the last lane before its cells)"
$repro eval tiny-arith --runs-root "$runs" | tail -3  # done already: prints its table's last lines

step "5/5 results, tables and figures"
$repro collect --runs-root "$runs" --results results
mkdir -p paper_tables/generated
# the tables and the report, and the figures, side by side: each only reads what collect wrote
(
  set -e
  for table in weighted-average step-time sampling; do
    $repro table "$table" --results results --format markdown --out "paper_tables/generated/$table.md"
    $repro table "$table" --results results --format csv --out "paper_tables/generated/$table.csv"
  done
  $repro report --results results --out results/REPORT.md
  .venv/bin/python scripts/gen-docs.py  # the README's and docs/results.md's verdict lines, copied from the new report
) &
tables=$!
for figure in reward-curve reward-entropy heldout step-time sampling eval-curve accuracy-tokens ave-tokens; do
  $repro plot "$figure" --results results --out "results/figures/$figure"
done
for figure in passk signal-loss; do  # these read the per-response eval records too
  $repro plot "$figure" --results results --runs-root "$runs" --out "results/figures/$figure"
done
$repro plot schedules --results results --out results/figures/schedules
wait "$tables"
$repro table weighted-average --results results
$repro status --runs-root "$runs" --sweep sweeps/tiny.yaml
$repro status --runs-root "$runs" --sweep sweeps/tiny-hard.yaml
$repro status --runs-root "$runs" --sweep sweeps/tiny-beyond.yaml
$repro status --runs-root "$runs" --sweep sweeps/tiny-bench.yaml
$repro status --runs-root "$runs" --sweep sweeps/tiny-matched.yaml
echo "main job done in $(( $(date +%s) - started ))s"
