#!/usr/bin/env bash
# The accelerator check: the game, the trainer and search on one GPU or TPU, in one
# script that fits a 10-minute lease. The steps share a budget of HM_DEVICE_CHECK_BUDGET
# seconds (540; 1,800 with HM_DEVICE_CHECK_QUICK), most important first, each cut at its
# own limit or at what is left of the budget. Every benchmark appends its JSON lines to
# OUT/device.jsonl and its output to OUT/device.log; a step that fails, is cut or is
# skipped is logged, the next one runs, and the script exits 1.
#
#   bench/device_check.sh OUT                          # on the accelerator machine
#   HM_DEVICE_CHECK_QUICK=1 bench/device_check.sh OUT  # tiny sizes: checks the script on any machine
#
# Python: $PYTHON, else .venv/bin/python if it exists, else python3. The repo root goes
# on PYTHONPATH, so hm need not be installed; a machine without network access needs
# hm's pure-Python dependencies beside its own JAX (bench/README.md, "On a lent
# accelerator", lists the wheels and the command that fetches them).
#
# What it measures, in this order (record the numbers in docs/performance.md §4.6 with
# the hardware):
#   1. bench_train: the default config (local network, program bonus 3, greedy teacher
#      on one slot in 8, squashed value: bench_train builds its own config, so the flags
#      below name TrainConfig's defaults and follow them when they change), 16,384 and
#      2,048 envs, f32 and bf16;
#   2. bench_search: one search of 32 simulations against its parts, 2,048 and 256 games;
#   3. bench_env: the game alone, 16,384 and 2,048 games;
#   4. search play (bin/evaluate's program): whole games with 32 simulations a move, the
#      planning baseline, and the policy at HM_DEVICE_CHECK_POLICY if set (carry it).
set -uo pipefail

out=${1:?usage: bench/device_check.sh OUT}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$root" || exit 1
if [[ -n ${PYTHON:-} ]]; then py=$PYTHON
elif [[ -x .venv/bin/python ]]; then py=.venv/bin/python
else py=python3
fi
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
jsonl=$out/device.jsonl
log=$out/device.log

if [[ -n ${HM_DEVICE_CHECK_QUICK:-} ]]; then
  small=64 large=128 steps=8 limit=300 games_small=8 games_large=16 episodes=4 repeats=1 budget=1800
else
  small=2048 large=16384 steps=128 limit=170 games_small=256 games_large=2048 episodes=256 repeats=2 budget=540
fi

budget=${HM_DEVICE_CHECK_BUDGET:-$budget}
deadline=$((SECONDS + budget))
failed=0
step() {  # step SECONDS NAME MODULE ARGS...: `python -m MODULE ARGS` under a time limit, logged
  local seconds=$1 name=$2
  shift 2
  local left=$((deadline - SECONDS))
  if ((left < 20)); then
    echo "=== $name skipped: ${left}s of the ${budget}s budget left" | tee -a "$log"
    failed=$((failed + 1))
    return
  fi
  ((seconds > left)) && seconds=$left
  echo "=== $name ($(date -u +%H:%M:%S), limit ${seconds}s): $*" | tee -a "$log"
  local began=$SECONDS
  timeout "$seconds" "$py" -m "$@" 2>&1 | tee -a "$log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: $((SECONDS - began)) s" | tee -a "$log"
  if ((rc != 0)); then
    echo "=== $name failed: exit $rc" | tee -a "$log"
    failed=$((failed + 1))
  fi
}

{
  echo "=== machine"
  date -u
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || true
  "$py" -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__); print(jax.devices())'
} 2>&1 | tee -a "$log"

for n in "$large" "$small"; do
  for precision in f32 bf16; do
    step "$limit" "train $n $precision" bench.bench_train --env game --network local \
      --program-bonus 3 --teacher-every 8 --value-transform sqrt \
      --num-envs "$n" --precision "$precision" --repeats "$repeats" --out "$jsonl"
  done
done
for n in "$games_large" "$games_small"; do
  step "$limit" "search $n" bench.bench_search --num-games "$n" --num-simulations 32 --repeats "$repeats" --out "$jsonl"
done
for n in "$large" "$small"; do
  step "$limit" "env $n" bench.bench_env --num-envs "$n" --num-steps "$steps" --repeats "$repeats" --out "$jsonl"
done
# Whole games with 32 simulations a move: the planning baseline, and the policy at
# HM_DEVICE_CHECK_POLICY (a run directory or policy.eqx, carried to the machine) if set.
step "$limit" "search play" hm.tools.evaluate ${HM_DEVICE_CHECK_POLICY:+"$HM_DEVICE_CHECK_POLICY"} \
  --baseline search --search 32 --episodes "$episodes" --seed 1 --json "$out/search_play.json"

echo "=== done ($(date -u +%H:%M:%S)): $failed step(s) failed; results in $jsonl" | tee -a "$log"
exit $((failed > 0))
