#!/usr/bin/env bash
# The GPU benchmark, in one launch on the GPU host: build with what is installed there,
# run every test (GPU tests included), the pack/unpack kernel benchmark, and the four
# engines on (a) dense Qwen3-8B, 1 trainer rank -> 1 inference rank, and (b) a Qwen3-MoE
# (mid-qwen3-moe) with trainer TP2/EP2 -> inference DP2/EP2. The raw bandwidth of the
# same pull path is measured in each run (--measure-link). Placement adapts to the GPUs
# present: with one GPU every rank shares it (labelled "shared GPU"); with two or more,
# trainers take the first half of the GPUs and inference ranks the second half.
#
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/run.sh   # summary.txt and JSON under $OUT, logs under $LOGS
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/latest}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# GPU benchmark, $(date -u +%Y-%m-%dT%H:%MZ), git $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
if [[ "$gpus" -ge 2 ]]; then
  say "# placement: $gpus GPUs; trainer ranks on GPU 0..$((gpus / 2 - 1)), inference ranks on GPU $((gpus / 2))..$((gpus - 1))"
  nvidia-smi topo -m | sed 's/^/# /' | tee -a "$SUM"
else
  say "# placement: ONE GPU shared by every rank (trainer and inference copies on the same H200); NCCL refuses"
  say "# two ranks on one GPU, so trainer gathers and the broadcast baseline go through host-staged MPI"
fi

step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
grep -E "^-- shardsync" "$LOGS/build.log" | tee -a "$SUM"
# CTEST_REGEX limits the tests (e.g. "Kernels|gpu\." when the CPU tests ran already).
step ctest 900 bash -c "cd build-gpu && ctest -j 4 --output-on-failure --timeout 600 ${CTEST_REGEX:+-R \"$CTEST_REGEX\"}"
grep -E "tests passed|Failed|Skipped|\*\*\*" "$LOGS/ctest.log" | tail -15 | tee -a "$SUM"
SS=build-gpu/apps/shardsync
KB=build-gpu/apps/shardsync-kernel-bench
step kernels 300 $KB --model qwen3-8b --inference tp2 --device cuda --layers 8 --reps 20 --json "$OUT/kernels.json"
cat "$LOGS/kernels.log" | tee -a "$SUM"
step dense 900 mpirun -np 2 --bind-to none $SS bench -m qwen3-8b -t tp1 -i tp1 --memory cuda --measure-link 10 \
  --syncs 3 --warmup 1 --send-buffer 1G --recv-buffer 1G --chunk 256M --bucket 1G --inflight 2 -q --json "$OUT/dense.json"
grep -v "^ *[0-9]\+ " "$LOGS/dense.log" | tail -12 | tee -a "$SUM"
step moe 900 mpirun -np 4 --bind-to none $SS bench -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 --memory cuda \
  --measure-link 10 --syncs 3 --warmup 1 --send-buffer 1G --recv-buffer 1G --chunk 256M --bucket 1G -q --json "$OUT/moe.json"
grep -v "^ *[0-9]\+ " "$LOGS/moe.log" | tail -12 | tee -a "$SUM"
