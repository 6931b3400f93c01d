#!/usr/bin/env bash
# The simulator's shardsync profile on this CPU host, out of sample (issue 23):
#   1. calibrate on Qwen3-0.6B TP2 -> TP1 x 2 replicas (4 ranks): one per-tensor cost per engine;
#   2. measure (every byte verified) and predict with it: mini-qwen3-moe TP2/EP2 -> DP2/EP2 x 2
#      (6 ranks), Qwen3-0.6B with trainer PP2 (TP1,PP2 -> TP1 x 2, 4 ranks), Qwen3-0.6B TP1 -> TP2
#      (3 ranks) and mini-qwen3-moe from trainer PP2/EP2/DP2 (-> DP2/EP2, 6 ranks);
#   3. fit two terms per engine (per tensor and per byte, simulate --fit) on the calibration run
#      and the first MoE run together, and predict the other three with them.
#   scripts/sim/validate-cpu.sh [OUT]   (default results/sim/cpu-calibrated; ~10 minutes on 2 cores)
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
predict() {  # name cluster suffix
  "$SS" simulate --compare "$OUT/$1.json" --cluster "$2" --json "$OUT/$1-$3.json" > "$OUT/$1-$3.txt"
  tail -8 "$OUT/$1-$3.txt"
}
validate() {  # name np bench-args...
  local name="$1" np="$2"; shift 2
  mpi "$np" "$SS" bench "$@" --syncs 3 --warmup 1 -q --json "$OUT/$name.json" > "$OUT/$name.txt" 2>&1
  predict "$name" "$OUT/cpu-qwen3-0.6b.json" predicted
}
validate mini-moe-tp2ep2-dp2ep2 6 -m mini-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 -r 2
validate qwen3-0.6b-pp2-tp1x2 4 -m qwen3-0.6b -t tp1,pp2 -i tp1 -r 2
validate qwen3-0.6b-tp1-tp2 3 -m qwen3-0.6b -t tp1 -i tp2
validate mini-moe-pp2ep2-dp2ep2 6 -m mini-qwen3-moe -t tp1,pp2,ep2,dp2 -i dp2,ep2
"$SS" simulate --fit "$OUT/cpu-two-terms.json" --fit-with "$OUT/cpu-qwen3-0.6b.run.json" \
  --fit-with "$OUT/mini-moe-tp2ep2-dp2ep2.json" > "$OUT/fit.txt"
cat "$OUT/fit.txt"
for name in qwen3-0.6b-pp2-tp1x2 qwen3-0.6b-tp1-tp2 mini-moe-pp2ep2-dp2ep2; do
  predict "$name" "$OUT/cpu-two-terms.json" two-terms
done
