#!/usr/bin/env bash
# The published Qwen3-235B experiment's shape in miniature, on the GPUs present: Qwen3-30B-A3B
# (61 GB in BF16), trainer TP2/PP2/EP2 (4 ranks, Megatron-style) -> inference as 4 ranks,
# either wide EP (DP4/EP4, one replica) or 2 replicas of TP2; all four engines in one launch,
# every byte verified, the pull path's copy bandwidth measured in the same run.
#
# The published setup has one GPU per rank (8 GPUs here). With fewer GPUs, trainer ranks
# share the first half of the GPUs and inference ranks the second half (2 GPUs: 4 ranks on
# each), so NCCL (one rank per GPU) is out: trainer gathers and the broadcast baseline go
# through host-staged MPI, and every figure is labelled with the placement.
#
#   CASES="dp4ep4 tp2x2" OUT=/tmp/out scripts/gpu/qwen3-shape.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/qwen3-shape}"
LOGS="${LOGS:-$OUT/logs}"
CASES="${CASES:-dp4ep4 tp2x2}"
SYNCS="${SYNCS:-2}"
SUM_MODE=append source scripts/gpu/common.sh
say "# Qwen3 experiment shape, $(date -u +%Y-%m-%dT%H:%MZ), git $(source_commit), cases: $CASES"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
say "# placement: $gpus GPU(s) for 8 ranks: trainer ranks 0-3 on GPU 0..$(( gpus >= 2 ? gpus / 2 - 1 : 0 )), inference ranks 4-7 on the rest"
[[ "$gpus" -lt 8 ]] && say "# NOT the published placement (one GPU per rank): ranks share GPUs; gathers and broadcast are host-staged MPI"

step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
  -DSHARDSYNC_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc) --target shardsync" \
  || { tail -40 "$LOGS/build.log"; exit 1; }
SS=build-gpu/apps/shardsync
for c in $CASES; do
  case "$c" in
    dp4ep4) inf=(-i dp4,ep4 -r 1) ;;
    tp2x2) inf=(-i tp2 -r 2) ;;
    *) say "unknown case $c"; exit 2 ;;
  esac
  step "$c" 560 mpirun -np 8 --bind-to none $SS bench -m qwen3-30b-a3b -t tp2,pp2,ep2,etp1 "${inf[@]}" --memory cuda \
    --measure-link 5 --syncs "$SYNCS" --warmup 1 --send-buffer 1G --recv-buffer 512M --chunk 256M --bucket 1G \
    --json "$OUT/$c.json"
  grep -v "^ *[0-9]\+ " "$LOGS/$c.log" | grep -v "^# sync\|^# [a-z0-9]* sync" | tail -14 | tee -a "$SUM"
done
