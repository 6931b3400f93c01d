#!/usr/bin/env bash
# FP8 targets on the GPU host (issue 20), in one launch: build; the quantizer's GPU tests (the
# kernel bit for bit against the CPU twin, and both against PyTorch's float8_e4m3fn on edge
# cases); the quantize kernel's rate against a device copy (shardsync-fp8-bench, synthetic
# weights, three shapes); the FP8 engine tests on GPU memory; and colocated Qwen3-8B
# (trainer TP1 -> inference TP1, one GPU shared) with a bf16 target, an FP8 target with bf16
# on the wire (inference ranks quantize) and with FP8 on the wire (the trainer quantizes as it
# packs), every byte, code and scale verified in the run that times it.
#
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/fp8.sh
#   PARTS="tests kernel" ... / PARTS=engines REBUILD=0 SUM_MODE=append ... (in two launches)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/fp8}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# FP8 targets on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
if [[ ! -x build-gpu/apps/shardsync || "${REBUILD:-1}" == 1 ]]; then
  step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
fi
PARTS="${PARTS:-tests kernel engines}"
if [[ " $PARTS " == *" tests "* ]]; then
step ctest 600 bash -c "cd build-gpu && ctest -j 2 --output-on-failure --timeout 300 -R 'Kernels|Fp8|Synth|Quant|gpu\.'"
grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -15 | tee -a "$SUM"
cp "$LOGS/ctest.log" "$OUT/ctest.log"
step vs-torch 300 python3 scripts/gpu/fp8_vs_torch.py build-gpu/apps/shardsync-fp8-bench --json "$OUT/fp8-vs-torch.json"
tail -12 "$LOGS/vs-torch.log" | tee -a "$SUM"
fi
if [[ " $PARTS " == *" kernel "* ]]; then
FB=build-gpu/apps/shardsync-fp8-bench
for shape in 16384x16384 4096x12288 7168x18432; do
  step "kernel-$shape" 300 $FB --device cuda --rows "${shape%x*}" --cols "${shape#*x}" --reps 50 --json "$OUT/kernel-$shape.json"
  grep -E "^ *(copy|quantize) " "$LOGS/kernel-$shape.log" | sed "s/^/$shape /" | tee -a "$SUM"
done
if command -v ncu > /dev/null && [[ "${PROFILE:-1}" == 1 ]]; then
  # Where the quantize kernel's time goes: DRAM and SM throughput against their peaks.
  step ncu-quantize 300 ncu --clock-control none --kernel-name regex:fp8_quantize --metrics \
    gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
    --csv --log-file "$OUT/ncu-quantize.csv" $FB --device cuda --rows 4096 --cols 12288 --reps 3
  tail -8 "$OUT/ncu-quantize.csv" | tee -a "$SUM"
fi
fi
[[ " $PARTS " == *" engines "* ]] || exit 0
SS=build-gpu/apps/shardsync
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2 --syncs 5 --warmup 1 -q"
for qw in none:bf16 fp8-block128:bf16 fp8-block128:fp8; do
  q=${qw%:*} w=${qw#*:} name="$q"
  [[ $q == none ]] || name="$q-wire-$w"
  step "qwen3-8b-$name" 300 mpirun -np 2 --bind-to none $SS bench -m qwen3-8b -t tp1 -i tp1 --memory cuda -e v3,v4 \
    --quant "$q" --wire "$w" $BUF --json "$OUT/qwen3-8b-tp1-tp1-$name.json"
  grep -E "^# engine|^  *v[0-9]" "$LOGS/qwen3-8b-$name.log" | sed "s/^/$name /" | tee -a "$SUM"
  step "qwen3-8b-$name-layerwise" 300 mpirun -np 2 --bind-to none $SS bench -m qwen3-8b -t tp1 -i tp1 --memory cuda -e v3 \
    --layerwise --quant "$q" --wire "$w" $BUF --json "$OUT/qwen3-8b-tp1-tp1-$name-layerwise.json"
  grep -E "^  *v[0-9]" "$LOGS/qwen3-8b-$name-layerwise.log" | sed "s/^/$name layerwise /" | tee -a "$SUM"
done
