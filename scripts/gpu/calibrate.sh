#!/usr/bin/env bash
# The simulator's shardsync profile on the GPU host, validated out of sample (issue 23):
#   1. calibrate: `simulate --calibrate` on dense Qwen3-8B TP1 -> TP1 (2 ranks on one GPU): the
#      link and copy microbenchmarks, every engine timed, one per-tensor cost per engine fitted;
#   2. predict other models and layouts on the same GPU and measure them (bench, every byte
#      verified): Qwen3-8B to 2 replicas, Qwen3-8B with trainer PP2 and with trainer TP2, and a MoE
#      model (TP2/EP2 -> DP2/EP2, and trainer PP2/EP2/DP2 -> DP2/EP2); `simulate --compare` prints
#      predicted vs measured for each.
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/calibrate.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/sim/h200}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
gpu_script_start "simulator calibration"
bufs=(--memory cuda --send-buffer 1G --recv-buffer 1G --chunk 256M)
# The calibration is named by the GPU it ran on (h200-qwen3-8b.json on an H200, h100-... on an H100).
kind=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9][0-9]*' | head -1 | tr H h)
CAL="$OUT/${kind:-gpu}-qwen3-8b.json"
step calibrate 300 mpirun --oversubscribe --bind-to none -np 2 "$SS" simulate --calibrate "$CAL" \
  -m qwen3-8b -t tp1 -i tp1 "${bufs[@]}" --syncs 3 --warmup 1
grep -A8 "^# calibrated" "$LOGS/calibrate.log" | tee -a "$SUM"
validate() {  # name np bench-args...
  local name="$1" np="$2"; shift 2
  step "$name" 300 mpirun --oversubscribe --bind-to none -np "$np" "$SS" bench "$@" "${bufs[@]}" --syncs 3 --warmup 1 -q \
    --json "$OUT/$name.json" || return
  "$SS" simulate --compare "$OUT/$name.json" --cluster "$CAL" --json "$OUT/$name-predicted.json" \
    > "$OUT/$name-predicted.txt" 2>&1
  tail -7 "$OUT/$name-predicted.txt" | tee -a "$SUM"
}
validate qwen3-8b-tp1-tp1x2 3 -m qwen3-8b -t tp1 -i tp1 -r 2
validate qwen3-8b-pp2-tp1 3 -m qwen3-8b -t tp1,pp2 -i tp1
validate mid-moe-tp2ep2-dp2ep2 4 -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2
# More shapes for the two-term fit (simulate --fit on the calibration and the MoE run above) to
# predict: dense Qwen3-8B from a TP2 trainer, and the MoE model from trainer PP2/EP2/DP2.
validate qwen3-8b-tp2-tp1 3 -m qwen3-8b -t tp2 -i tp1
validate mid-moe-pp2ep2-dp2ep2 6 -m mid-qwen3-moe -t tp1,pp2,ep2,dp2 -i dp2,ep2
[[ ${#FAILED_STEPS[@]} -eq 0 ]] && say "# all steps passed" || { say "# FAILED: ${FAILED_STEPS[*]}"; exit 1; }
