#!/usr/bin/env bash
# Where the strided pieces lie (issue 17): the engine's copies of rows (o_proj and down_proj
# column halves) read at 59% of a contiguous copy in the kernel bench and the engine, while the
# strided sweep runs the same kernel on the same access pattern at the contiguous rate. The
# sweep's runs start at multiples of 4 KiB; the engine's tensors and parameters at multiples
# of 256 bytes. On the GPU host, every copy checked:
#   1. the strided sweep through a CUDA IPC mapping, with cases whose starts are 256 bytes off
#      a 4 KiB boundary (source, destination, both);
#   2. the kernel bench's TP2 rank 0 pieces (36 layers) with HF tensors and packed pieces at
#      multiples of 256 B, 4 KiB and 2 MiB (--align), locally and through IPC;
# As run at bc9d525 (results/gpu/align/) it also ran the engines with the trainer's tensors and
# the consumer's parameters at those alignments, and ncu on them, through two experiment knobs
# (SHARDSYNC_EXP_TRAINER_ALIGN, SHARDSYNC_EXP_LIVE_ALIGN) that 6781bcf removed with the fix
# (whole-page allocations): `git show bc9d525:scripts/gpu/align.sh` is that version.
#
#   OUT=/tmp/out LOGS=/tmp/out/logs scripts/gpu/align.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/align}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# alignment of the strided pieces on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
CFG="-DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90"
step build 400 bash -c "cmake -S . -B build-gpu $CFG && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
step sweep-build 120 nvcc -O3 -arch=sm_90 -std=c++17 -Ilib -Ikernels bench/gpu/strided_sweep.cu -o "$LOGS/strided_sweep" -lcuda
step sweep-ipc 300 bash -c "'$LOGS/strided_sweep' 10 1 ipc > '$OUT/strided-sweep-ipc.jsonl'"
python3 scripts/gpu/sweep_summary.py "$OUT/strided-sweep-ipc.jsonl" | tee -a "$SUM"
KB="build-gpu/apps/shardsync-kernel-bench --model qwen3-8b --inference tp2 --device cuda --layers 36 --reps 10"
for a in 256 4096 2097152 256 4096 2097152; do
  for m in ipc local; do
    n=$((${n:-0} + 1))
    flag=""; [[ $m == ipc ]] && flag=--ipc
    step "kernels-$m-$a-$n" 300 $KB $flag --align $a --json "$OUT/kernels-$m-$a-$n.json"
    grep -E "^ *(memcpy|pack|strided|copy-ipc|pack-ipc|strided-ipc) " "$LOGS/kernels-$m-$a-$n.log" | sed "s/^/$m align $a: /" | tee -a "$SUM"
  done
done
