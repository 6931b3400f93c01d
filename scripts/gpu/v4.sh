#!/usr/bin/env bash
# V4 (direct pulls, no trainer gather) against V3 on the GPU host, in one launch: build,
# run the GPU tests (every engine row on --memory cuda) and the kernel tests, then the two
# engine comparisons of issue 16, every byte verified in the same run that times it:
#   (a) mid-qwen3-moe, trainer TP2/EP2 -> inference DP2/EP2 (4 ranks)
#   (b) Qwen3-8B, trainer TP2 -> inference TP1 (3 ranks)
# With one GPU every rank shares it (labelled in the summary): the trainer's TP gather then
# goes through host-staged MPI (NCCL refuses two ranks on one GPU), which V4 does not run.
#
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/v4.sh   # summary.txt and JSON under $OUT
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/v4}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# V4 vs V3 on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
[[ "$gpus" -ge 2 ]] && say "# placement: $gpus GPUs; trainers on the first half, inference ranks on the second" ||
  say "# placement: ONE GPU shared by every rank (trainer and inference memory on the same H200)"
step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
step ctest 600 bash -c "cd build-gpu && ctest -j 2 --output-on-failure --timeout 300 -R 'Kernels|gpu\.'"
grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -15 | tee -a "$SUM"
SS=build-gpu/apps/shardsync
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2"
step moe 400 mpirun -np 4 --bind-to none $SS bench -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 --memory cuda -e v3,v4 \
  --measure-link 10 --syncs 5 --warmup 1 $BUF -q --json "$OUT/moe-tp2ep2-dp2ep2.json"
grep -v "^ *[0-9]\+ " "$LOGS/moe.log" | tail -8 | tee -a "$SUM"
step dense 400 mpirun -np 3 --bind-to none $SS bench -m qwen3-8b -t tp2 -i tp1 --memory cuda -e v3,v4 \
  --measure-link 10 --syncs 5 --warmup 1 $BUF -q --json "$OUT/qwen3-8b-tp2-tp1.json"
grep -v "^ *[0-9]\+ " "$LOGS/dense.log" | tail -8 | tee -a "$SUM"
cp "$LOGS/ctest.log" "$OUT/ctest.log" 2>/dev/null
