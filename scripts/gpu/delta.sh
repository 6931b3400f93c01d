#!/usr/bin/env bash
# Delta sync on GPU memory (--delta --memory cuda, issue 21) on the GPU host: build; the kernel
# tests (the GPU's delta records and their apply against the host codec, byte for byte, among
# them); then the pull engines on one H200, each run full and with --delta alternately
# (scripts/bench-delta.sh), every element verified on the GPU against the value of the version
# it last changed at, the unchanged ones included:
#   the tiny MoE layout (6 ranks sharing the GPU), every engine, densities 0.02, 0 and 1;
#   Qwen3-8B, trainer TP1 -> inference TP1 (2 ranks sharing the GPU), v1-v4 with 2% of elements
#   changing, v3 and v4 with 2% of rows.
# One pair of runs (full, then --delta) each, to fit the GPU host's 10-minute call.
#
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/delta.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/delta}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# delta sync on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc) --target shardsync test_kernels test_delta" \
  || { tail -40 "$LOGS/build.log"; exit 1; }
step kernels 300 build-gpu/tests/test_kernels
grep -E "PASSED|FAILED|SKIPPED|^\[  FAILED" "$LOGS/kernels.log" | tail -8 | tee -a "$SUM"
step delta-unit 120 build-gpu/tests/test_delta
grep -E "PASSED|FAILED" "$LOGS/delta-unit.log" | tail -3 | tee -a "$SUM"
export BUILD=build-gpu OUT_DIR="$OUT" MPIRUN_ARGS="--bind-to none"
BUF="--send-buffer 1G --recv-buffer 1G --chunk 64M --inflight 2 --syncs 5 --warmup 1 --memory cuda"
step tiny-moe-0.02 240 scripts/bench-delta.sh tiny-moe-0.02 6 1 0.02 --layout tiny-moe-local $BUF
cat "$OUT/tiny-moe-0.02-summary.txt" >> "$SUM" 2>/dev/null
step qwen3-8b-uniform 300 scripts/bench-delta.sh qwen3-8b-uniform 2 1 0.02 -m qwen3-8b -t tp1 -i tp1 -e v1,v2,v3,v4 $BUF
cat "$OUT/qwen3-8b-uniform-summary.txt" >> "$SUM" 2>/dev/null
step qwen3-8b-rows 240 scripts/bench-delta.sh qwen3-8b-rows 2 1 0.02 -m qwen3-8b -t tp1 -i tp1 -e v3,v4 $BUF --update-pattern rows
cat "$OUT/qwen3-8b-rows-summary.txt" >> "$SUM" 2>/dev/null
for d in 0 1; do
  step "tiny-moe-$d" 120 scripts/bench-delta.sh "tiny-moe-$d" 6 1 "$d" --layout tiny-moe-local $BUF
  cat "$OUT/tiny-moe-$d-summary.txt" >> "$SUM" 2>/dev/null
done
