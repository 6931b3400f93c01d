#!/usr/bin/env bash
# The architecture families of issue 22 on the GPU host, weights in GPU memory:
#   tiny variants of each (Qwen2, Mistral, Mixtral, DeepSeek-V2, GLM-4.5, gpt-oss, Llama with
#     mlp_bias): every engine, a layout with TP and EP, every element verified;
#   the bundled real configs that fit one GPU twice over (trainer + inference copies on the
#     same GPU): Qwen2.5-7B-Instruct TP1 -> TP2 and DeepSeek-V2-Lite TP1 -> TP2/EP2: plans
#     recorded (`plan record`), then one verified sync per engine; gpt-oss-20b (41.8 GB) TP1 ->
#     TP2 and TP1 -> TP2/EP2 needs an H200 (84 GB held at once);
#   Mixtral-8x7B (93 GB) and GLM-4.5-Air (214 GB) do not fit twice on one GPU: their plans
#     are recorded at a serving layout (TP8 / TP8,EP8) and shown; on a host of several GPUs that
#     hold both copies (2 H200s for Mixtral; 4 H200s or 8 H100s for GLM-4.5-Air) they sync at
#     full size, TP<g/2> -> TP<g/2>, one rank a GPU.
#   OUT=/tmp/out LOGS=/tmp/logs [ONLY=regex] scripts/gpu/families.sh
# ONLY runs just the steps whose names match (e.g. ONLY=gpt-oss).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/families}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
gpu_script_start "architecture families"
gpu=(--memory cuda --syncs 2 --warmup 1 -q)
only() { [[ "$1" =~ ${ONLY:-.} ]]; }
tiny() {  # name np args...
  local name="$1" np="$2"; shift 2
  only "$name" || return 0
  step "$name" 240 tests/engine/gpu_check.sh "$np" "$SS" "$@" "${gpu[@]}" --json "$OUT/$name.json"
  grep -E "^ok|FAIL|^  (broadcast|v[0-9])" "$LOGS/$name.log" | tee -a "$SUM"
}
tiny tiny-qwen2 6 -m tiny-qwen2 -t tp2 -i tp4
tiny tiny-mistral 5 -m tiny-mistral -t tp2 -i pp3
tiny tiny-mixtral 6 -m tiny-mixtral -t tp2,ep2,etp1 -i dp2,ep2 -r 2
tiny tiny-deepseek-v2 6 -m tiny-deepseek-v2 -t tp2,ep2,etp1 -i tp4
tiny tiny-glm4-moe 6 -m tiny-glm4-moe -t tp2,pp2,layers=2/1 -i tp2,ep2
tiny tiny-llama-mlp-bias 5 -m tiny-llama -t tp2 -i pp3
tiny tiny-gpt-oss-tp 6 -m tiny-gpt-oss -t tp2,ep2,etp1 -i tp4
tiny tiny-gpt-oss-ep 6 -m tiny-gpt-oss -t tp2,ep2,etp2 -i dp2,ep2
real() {  # name np model trainer inference
  local name="$1" np="$2" model="$3" trainer="$4" inference="$5"
  only "$name" || return 0
  step "$name-plan" 300 "$SS" plan record -m "$model" -t "$trainer" -i "$inference" -o "$OUT/$name.h5"
  tail -3 "$LOGS/$name-plan.log" | tee -a "$SUM"
  "$SS" plan show "$OUT/$name.h5" > "$OUT/$name-plan.txt" 2>&1; rm -f "$OUT/$name.h5"
  step "$name" 420 mpirun --oversubscribe --bind-to none -np "$np" "$SS" bench -m "$model" -t "$trainer" -i "$inference" \
    --memory cuda --send-buffer 1G --recv-buffer 1G --chunk 64M --syncs 1 --warmup 1 -q --json "$OUT/$name.json"
  grep -E "^#|^  (broadcast|v[0-9])" "$LOGS/$name.log" | grep -v "UCX  WARN" | tee -a "$SUM"
}
real qwen2.5-7b 3 qwen2.5-7b-instruct tp1 tp2
real deepseek-v2-lite 3 deepseek-v2-lite tp1 tp2,ep2
if (( $(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1) > 100000 )); then
  real gpt-oss-20b-tp2 3 gpt-oss-20b tp1 tp2
  real gpt-oss-20b-ep2 3 gpt-oss-20b tp1 tp2,ep2
else
  only gpt-oss-20b && say "# gpt-oss-20b: skipped, a trainer and an inference copy (84 GB) do not fit this GPU"
fi
for spec in "mixtral-8x7b mixtral-8x7b-v0.1 tp8 tp8" "glm-4.5-air glm-4.5-air tp8,ep8 tp8,ep8"; do
  read -r name model trainer inference <<<"$spec"
  only "$name" || continue
  step "$name-plan" 300 "$SS" plan record -m "$model" -t "$trainer" -i "$inference" -o "$OUT/$name.h5"
  tail -3 "$LOGS/$name-plan.log" | tee -a "$SUM"
  "$SS" plan show "$OUT/$name.h5" > "$OUT/$name-plan.txt" 2>&1; rm -f "$OUT/$name.h5"
done
# Mixtral-8x7B (93.4 GB) and GLM-4.5-Air (213.8 GB) synced at full size where the host's GPUs hold a
# trainer and an inference copy with room to spare (85% of their memory): TP<g/2> -> TP<g/2>, one
# rank a GPU (trainers on the first half). Two H200s take Mixtral; four H200s, or eight H100s, GLM.
mem_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
for spec in "mixtral-8x7b mixtral-8x7b-v0.1 93405585408" "glm-4.5-air glm-4.5-air 213751699968"; do
  read -r name model bytes <<<"$spec"
  only "$name" || continue
  half=$(( gpus / 2 ))
  if (( half < 1 )) || (( bytes * 100 > half * mem_mib * 1048576 * 85 )); then
    say "# $name: no full-size sync here: a trainer and an inference copy ($(( 2 * bytes / 1000000000 )) GB) need more than $gpus GPU(s) of $mem_mib MiB"
    continue
  fi
  real "$name-tp$half" $(( 2 * half )) "$model" "tp$half" "tp$half"
done
[[ ${#FAILED_STEPS[@]} -eq 0 ]] && say "# all steps passed" || { say "# FAILED: ${FAILED_STEPS[*]}"; exit 1; }
