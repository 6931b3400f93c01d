#!/usr/bin/env bash
# FSDP2 trainers (--trainer fsdp<N>) on the GPU host, weights in GPU memory:
#   tiny-qwen3-moe fsdp4 -> DP2/EP2, tiny-qwen3 fsdp5 -> TP1 (chunks that end short and empty)
#     and tiny-gpt-oss fsdp2,dp2 (HSDP) -> TP2: every engine, every element verified;
#   Qwen3-30B-A3B at full size (61 GB bf16), fsdp2 -> DP2/EP2: the layout of vLLM's FSDP + EP
#     examples, a trainer copy and an inference copy (122 GB) on one GPU: plan recorded, one
#     verified sync per engine. Needs more than 100 GB of GPU memory (an H200).
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/fsdp.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/fsdp}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
gpu_script_start "FSDP2 trainers"
gpu=(--memory cuda --syncs 2 --warmup 1 -q)
tiny() {  # name np args...
  local name="$1" np="$2"; shift 2
  step "$name" 240 tests/engine/gpu_check.sh "$np" "$SS" "$@" "${gpu[@]}" --json "$OUT/$name.json"
  grep -E "^ok|FAIL|^  (broadcast|v[0-9])" "$LOGS/$name.log" | tee -a "$SUM"
}
tiny tiny-qwen3-moe-fsdp4 6 -m tiny-qwen3-moe -t fsdp4 -i dp2,ep2
tiny tiny-qwen3-fsdp5 6 -m tiny-qwen3 -t fsdp5 -i tp1
tiny tiny-gpt-oss-hsdp 6 -m tiny-gpt-oss -t fsdp2,dp2 -i tp2
if (( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1) > 100000 )); then
  name=qwen3-30b-a3b-fsdp2
  step "$name-plan" 300 "$SS" plan record -m qwen3-30b-a3b -t fsdp2 -i dp2,ep2 -o "$OUT/$name.h5"
  tail -3 "$LOGS/$name-plan.log" | tee -a "$SUM"
  "$SS" plan show "$OUT/$name.h5" > "$OUT/$name-plan.txt" 2>&1
  step "$name" 480 mpirun --oversubscribe --bind-to none -np 4 "$SS" bench -m qwen3-30b-a3b -t fsdp2 -i dp2,ep2 \
    --plans "$OUT/$name.h5" --memory cuda --send-buffer 1G --recv-buffer 1G --chunk 64M --syncs 1 --warmup 1 -q \
    --json "$OUT/$name.json"
  rm -f "$OUT/$name.h5"
  grep -E "^#|^  (broadcast|v[0-9])" "$LOGS/$name.log" | grep -v "UCX  WARN" | tee -a "$SUM"
else
  say "# qwen3-30b-a3b-fsdp2: skipped, a trainer and an inference copy (122 GB) do not fit this GPU"
fi
[[ ${#FAILED_STEPS[@]} -eq 0 ]] && say "# all steps passed" || { say "# FAILED: ${FAILED_STEPS[*]}"; exit 1; }
