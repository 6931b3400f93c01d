#!/usr/bin/env bash
# Weights that change at a density (--update-density, issue 21) on the GPU host: build; the
# kernels' synth and verify against their CPU twins with density keys (uniform and rows) among
# the kernel tests; colocated Qwen3-8B (trainer TP1 -> inference TP1, one GPU shared), v3 and
# v4, with every element changing and with 2% of elements / rows changing, every element
# verified on the GPU against the value of the version it last changed at; and --delta with
# GPU memory refused (not built on the device yet).
#
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/updates.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/updates}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# update density on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
step build 600 bash -c "cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
  -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
step ctest 600 bash -c "cd build-gpu && ctest -j 2 --output-on-failure --timeout 300 -R 'Kernels|Updates|Synth'"
grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -8 | tee -a "$SUM"
cp "$LOGS/ctest.log" "$OUT/ctest.log"
SS=build-gpu/apps/shardsync
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2 --syncs 5 --warmup 1 -q"
for u in "1:uniform" "0.02:uniform" "0.02:rows"; do
  d=${u%:*} p=${u#*:} name="density-$d-$p"
  step "qwen3-8b-$name" 300 mpirun -np 2 --bind-to none $SS bench -m qwen3-8b -t tp1 -i tp1 --memory cuda -e v3,v4 \
    --update-density "$d" --update-pattern "$p" $BUF --json "$OUT/qwen3-8b-tp1-tp1-$name.json"
  grep -E "^# engine|^  *v[0-9]" "$LOGS/qwen3-8b-$name.log" | sed "s/^/$name /" | tee -a "$SUM"
  python3 - "$OUT/qwen3-8b-tp1-tp1-$name.json" <<'PY' | tee -a "$SUM"
import json, sys
j = json.load(open(sys.argv[1]))
for e in j["engines"]:
    print("%s verify_s %.4f (mean over inference ranks), wrong %d" % (e["engine"], e["verify_s"], e["wrong"]))
PY
done
step delta-refused 120 bash -c "mpirun -np 2 --bind-to none $SS sync -m tiny-qwen3 -t tp1 -i tp1 --memory cuda --delta -q 2>&1 | tee /dev/stderr | grep -q -- '--delta: --memory cuda: delta sync runs on host memory'"
tail -3 "$LOGS/delta-refused.log" | tee -a "$SUM"
