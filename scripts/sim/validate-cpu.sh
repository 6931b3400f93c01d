#!/usr/bin/env bash
# The simulator's shardsync profile on this CPU host, out of sample (issue 23): calibrate on
# Qwen3-0.6B TP2 -> TP1 x 2 replicas (4 ranks), then measure and predict mini-qwen3-moe
# TP2/EP2 -> DP2/EP2 x 2 (6 ranks) and Qwen3-0.6B with trainer PP2 (TP1,PP2 -> TP1 x 2, 4 ranks).
#   scripts/sim/validate-cpu.sh [OUT]   (default results/sim/cpu-calibrated; ~6 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-results/sim/cpu-calibrated}"
SS="${SS:-build/apps/shardsync}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p "$OUT"
mpi() { timeout 900 mpirun --oversubscribe -np "$@"; }
mpi 4 "$SS" simulate --calibrate "$OUT/cpu-qwen3-0.6b.json" -m qwen3-0.6b -t tp2 -i tp1 -r 2 --syncs 3 --warmup 1 \
  2>&1 | grep -v "^# .* sync [0-9]" > "$OUT/calibrate.txt"
tail -9 "$OUT/calibrate.txt"
validate() {  # name np bench-args...
  local name="$1" np="$2"; shift 2
  mpi "$np" "$SS" bench "$@" --syncs 3 --warmup 1 -q --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  "$SS" simulate --compare "$OUT/$name.json" --cluster "$OUT/cpu-qwen3-0.6b.json" --json "$OUT/$name-predicted.json" \
    > "$OUT/$name-predicted.txt"
  tail -8 "$OUT/$name-predicted.txt"
}
validate mini-moe-tp2ep2-dp2ep2 6 -m mini-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 -r 2
validate qwen3-0.6b-pp2-tp1x2 4 -m qwen3-0.6b -t tp1,pp2 -i tp1 -r 2
