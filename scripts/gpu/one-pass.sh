#!/usr/bin/env bash
# One-pass pulls on the GPU host (issue 17), in one launch: build, the GPU tests, then the
# engines and the PyTorch peers on the same models and layouts, every byte verified in the
# same run that times it:
#   (a) colocated Qwen3-8B, trainer TP1 -> inference TP1 (2 ranks)
#   (b) colocated Qwen3-8B, trainer TP1 -> inference TP2 (3 ranks)
#   (c) mid-qwen3-moe, trainer TP2/EP2 -> inference DP2/EP2 (4 ranks)
# Engines run one pass (the default) and, for comparison, packed (--one-pass off) and as
# vLLM's layerwise reload (--layerwise: the path before one pass). Each engine run measures
# the pull path's raw copy (--measure-link: a cudaMemcpy through the IPC mapping); the
# floor is one copy of the bytes moved at that rate, so "of_link" = floor / time.
# With one GPU every rank shares it (the colocated setting); with two, trainers take GPU 0.
#
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/one-pass.sh
#   CASES="a b" PEERS=0 PROFILE=1 ... (a subset; no peers; an ncu profile of the copy kernels)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/one-pass}"
LOGS="${LOGS:-$OUT/logs}"
CASES="${CASES:-a b c}"
source scripts/gpu/common.sh
say "# one-pass pulls and peers on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
[[ "$gpus" -ge 2 ]] && say "# placement: $gpus GPUs; trainers on the first half, inference ranks on the second" ||
  say "# placement: ONE GPU shared by every rank (colocated: trainer and inference memory on the same H200)"
if [[ ! -x build-gpu/apps/shardsync || "${REBUILD:-1}" == 1 ]]; then
  step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
fi
if [[ "${TESTS:-1}" == 1 ]]; then
  step ctest 600 bash -c "cd build-gpu && ctest -j 2 --output-on-failure --timeout 300 -R 'Kernels|gpu\.'"
  grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -15 | tee -a "$SUM"
  cp "$LOGS/ctest.log" "$OUT/ctest.log"
fi
SS=build-gpu/apps/shardsync
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2 --measure-link 10 --syncs 5 --warmup 1 -q"
engines() {  # name np args...: one pass, packed, layerwise
  local name="$1" np="$2"; shift 2
  step "$name" 600 mpirun -np "$np" --bind-to none $SS bench "$@" --memory cuda -e v3,v4 $BUF --json "$OUT/$name.json"
  grep -v "^ *[0-9]\+ " "$LOGS/$name.log" | grep -E "^# (engine|one pass)|^  *v[0-9]|link" | tee -a "$SUM"
  step "$name-packed" 600 mpirun -np "$np" --bind-to none $SS bench "$@" --memory cuda -e v3,v4 --one-pass off $BUF \
    --json "$OUT/$name-packed.json"
  grep -E "^  *v[0-9]" "$LOGS/$name-packed.log" | sed 's/^/packed /' | tee -a "$SUM"
  step "$name-layerwise" 600 mpirun -np "$np" --bind-to none $SS bench "$@" --memory cuda -e v3 --layerwise $BUF \
    --json "$OUT/$name-layerwise.json"
  grep -E "^  *v[0-9]" "$LOGS/$name-layerwise.log" | sed 's/^/layerwise /' | tee -a "$SUM"
}
peers() {  # name tp: the PyTorch peers on Qwen3-8B
  [[ "${PEERS:-1}" == 1 && -f bench/peers/torch_peers.py ]] || return 0
  step "peers-$1" 600 python3 bench/peers/torch_peers.py --config configs/models/qwen3-8b.json --inference-tp "$2" \
    --peer bucketed-ipc,ipc-per-tensor,nccl-bcast,nccl-bucket --syncs 5 --warmup 1 --json "$OUT/peers-$1.json"
  tail -8 "$LOGS/peers-$1.log" | tee -a "$SUM"
}
for c in $CASES; do
  case "$c" in
    a) engines qwen3-8b-tp1-tp1 2 -m qwen3-8b -t tp1 -i tp1; peers qwen3-8b-tp1-tp1 1 ;;
    b) engines qwen3-8b-tp1-tp2 3 -m qwen3-8b -t tp1 -i tp2; peers qwen3-8b-tp1-tp2 2 ;;
    c) engines mid-moe-tp2ep2-dp2ep2 4 -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 ;;
  esac
done
kernel_benches() {  # KERNELS=0 leaves them out
  [[ "${KERNELS:-1}" == 1 ]] || return 0
  # The device's own copy rate (read + write, the batched kernel and cudaMemcpy), for the floor:
  # the whole of Qwen3-8B as inference TP1 reads it (whole tensors), and 8 layers of TP2's half.
  step kernels-tp1 300 build-gpu/apps/shardsync-kernel-bench --model qwen3-8b --inference tp1 --device cuda --layers 36 --reps 10 \
    --json "$OUT/kernels-tp1.json"
  tail -6 "$LOGS/kernels-tp1.log" | tee -a "$SUM"
  step kernels 300 build-gpu/apps/shardsync-kernel-bench --model qwen3-8b --inference tp2 --device cuda --layers 8 --reps 20 \
    --json "$OUT/kernels.json"
  tail -6 "$LOGS/kernels.log" | tee -a "$SUM"
  # The one-pass path's reads: TP2 rank 0's pieces of the whole model read through a CUDA IPC
  # mapping of another process's memory, against a contiguous copy over the same mapping; the
  # strided pieces (row-parallel halves) alone.
  step kernels-ipc 300 build-gpu/apps/shardsync-kernel-bench --model qwen3-8b --inference tp2 --device cuda --layers 36 --reps 10 \
    --ipc --json "$OUT/kernels-ipc.json"
  tail -8 "$LOGS/kernels-ipc.log" | tee -a "$SUM"
  # Two processes copying on the one GPU at once (as TP2's two inference ranks do): each one's
  # rates against the solo run above (the GPU time-slices between processes' contexts).
  step kernels-pair 300 bash -c "for r in 0 1; do build-gpu/apps/shardsync-kernel-bench --model qwen3-8b --inference tp2 \
    --rank \$r --device cuda --layers 36 --reps 10 --json $OUT/kernels-pair-\$r.json > $LOGS/kernels-pair-\$r.log 2>&1 & done; wait"
  tail -4 "$LOGS"/kernels-pair-*.log | tee -a "$SUM"
  # Copy-kernel shapes against cudaMemcpy, reading local memory and another process's through
  # CUDA IPC (4 GiB, every copy checked): what the batched kernel's shape costs.
  if [[ "${SWEEP:-1}" == 1 ]]; then
    step sweep-build 300 nvcc -O3 -arch=sm_90 -std=c++17 bench/gpu/copy_sweep.cu -o "$LOGS/copy_sweep" &&
      step sweep 300 bash -c "'$LOGS/copy_sweep' 4 10 > '$OUT/copy-sweep.jsonl'"
    python3 -c "
  import json,sys
  for l in open('$OUT/copy-sweep.jsonl'):
    d=json.loads(l)
    if 'kernel' in d: print('# sweep %-6s %-18s %7.1f GB/s one-way, %d wrong' % (d['source'], d['kernel'], d['GBps_one_way'], d['wrong_vectors']))
  " | tee -a "$SUM"
  fi
}
kernel_benches
if [[ "${PROFILE:-0}" == 1 ]]; then
  # ncu on inference rank 0 (world rank 1), v4, one pass, of cases (a) and (b): each copy
  # kernel's time, DRAM bytes and grid (3 syncs: 1 warm-up + 2; kernels serialize under ncu,
  # so each is timed alone on the GPU). One-run pieces and strided ones (the o_proj and
  # down_proj column halves of (b)) go in separate launches reading the IPC mapping.
  profile() {  # name np args...
    local name="$1" np="$2"; shift 2
    printf '%s\n' '#!/usr/bin/env bash' 'if [[ "$OMPI_COMM_WORLD_RANK" == 1 ]]; then' \
      "  exec ncu --clock-control none --kernel-name regex:'jobs_kernel|transpose' --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size --csv --log-file $OUT/ncu-$name-v4.csv \"\$@\"" \
      'fi' 'exec "$@"' > "$LOGS/ncu-wrap.sh"
    chmod +x "$LOGS/ncu-wrap.sh"
    step "ncu-$name" 300 mpirun -np "$np" --bind-to none "$LOGS/ncu-wrap.sh" $SS bench "$@" --memory cuda -e v4 \
      --send-buffer 1G --recv-buffer 1G --chunk 256M --syncs 2 --warmup 1 -q --no-verify
    tail -2 "$LOGS/ncu-$name.log" | tee -a "$SUM"
    python3 scripts/gpu/ncu_summary.py "$OUT/ncu-$name-v4.csv" | tee -a "$SUM"
  }
  profile qwen3-8b-tp1-tp1 2 -m qwen3-8b -t tp1 -i tp1
  profile qwen3-8b-tp1-tp2 3 -m qwen3-8b -t tp1 -i tp2
fi
