#!/usr/bin/env bash
# A/B of two builds on the GPU host (issue 17): the candidate (this tree) against a base build
# of BASE_DIR (a copy of another commit, made by `git archive` with its .shardsync-commit),
# both Release for sm_90, run alternately (ABAB) on the same GPU, every copy checked:
#   1. (SWEEP=1) the strided sweep: the sweep's kernels and the engine's jobs_kernel, reading
#      local memory and another process's through CUDA IPC (candidate only);
#   2. the kernel bench's --ipc reads (Qwen3-8B TP2 rank 0's pieces through a mapping);
#   3. the engines one pass: Qwen3-8B TP1 -> TP2 and TP1 -> TP1, mid-qwen3-moe TP2/EP2 ->
#      DP2/EP2, each with --measure-link;
#   4. (TESTS=1) the GPU tests of the candidate;
#   5. (ONE_PASS=1) the whole one-pass table (scripts/gpu/one-pass.sh) on the candidate.
# Used for ld.global.nc loads at 841fa50 (results/gpu/one-pass/nc-loads/) and for whole-page
# allocations (results/gpu/align/).
#
#   BASE_DIR=.carry/base OUT=/tmp/out LOGS=/tmp/out/logs scripts/gpu/ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/ab}"
LOGS="${LOGS:-$OUT/logs}"
BASE_DIR="${BASE_DIR:-.carry/base}"
source scripts/gpu/common.sh
say "# A/B on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), candidate $(source_commit), base $(head -1 "$BASE_DIR/.shardsync-commit" 2>/dev/null || echo '?')"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
CFG="-DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90"
step build 300 bash -c "cmake -S . -B build-gpu $CFG && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
# The base records its own commit (its own .shardsync-commit).
step build-base 300 bash -c "cmake -S $BASE_DIR -B $BASE_DIR/build-gpu $CFG && cmake --build $BASE_DIR/build-gpu -j $(nproc)" ||
  { tail -40 "$LOGS/build-base.log"; exit 1; }
if [[ "${SWEEP:-0}" == 1 ]]; then
  step sweep-build 120 nvcc -O3 -arch=sm_90 -std=c++17 -Ilib -Ikernels bench/gpu/strided_sweep.cu -o "$LOGS/strided_sweep" -lcuda
  for src in local ipc; do
    step "sweep-$src" 200 bash -c "'$LOGS/strided_sweep' 10 1 $src > '$OUT/strided-sweep-$src.jsonl'"
    python3 scripts/gpu/sweep_summary.py "$OUT/strided-sweep-$src.jsonl" | tee -a "$SUM"
  done
fi
bin_of() { [[ $1 == a ]] && echo build-gpu/apps || echo "$BASE_DIR/build-gpu/apps"; }
tag_of() { [[ $1 == a ]] && echo new || echo base; }
KB="--model qwen3-8b --inference tp2 --device cuda --layers 36 --reps 10 --ipc"
n=0
for ab in a b a b; do
  n=$((n + 1)); bin=$(bin_of $ab); tag=$(tag_of $ab)
  step "kernels-ipc-$tag-$n" 300 $bin/shardsync-kernel-bench $KB --json "$OUT/kernels-ipc-$tag-$n.json"
  grep -E "^ *(copy-ipc|pack-ipc|strided-ipc) " "$LOGS/kernels-ipc-$tag-$n.log" | sed "s/^/$tag $n /" | tee -a "$SUM"
done
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2 --measure-link 10 --syncs 5 --warmup 1 -q"
for c in "qwen3-8b-tp1-tp2 3 -m qwen3-8b -t tp1 -i tp2" "qwen3-8b-tp1-tp1 2 -m qwen3-8b -t tp1 -i tp1" \
         "mid-moe-tp2ep2-dp2ep2 4 -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2"; do
  set -- $c
  name0=$1 np=$2; shift 2
  n=0
  for ab in a b a b; do
    n=$((n + 1)); bin=$(bin_of $ab); tag=$(tag_of $ab)
    name="$name0-$tag-$n"
    step "$name" 300 mpirun -np "$np" --bind-to none $bin/shardsync bench "$@" --memory cuda -e v3,v4 $BUF --json "$OUT/$name.json"
    grep -E "^  *v[0-9]|link" "$LOGS/$name.log" | sed "s/^/$tag $n /" | tee -a "$SUM"
  done
done
if [[ "${TESTS:-1}" == 1 ]]; then
  step ctest 400 bash -c "cd build-gpu && ctest -j 2 --output-on-failure --timeout 300 -R 'Kernels|gpu\.'"
  grep -E "tests passed|Failed|\*\*\*" "$LOGS/ctest.log" | tail -15 | tee -a "$SUM"
  cp "$LOGS/ctest.log" "$OUT/ctest.log"
fi
if [[ "${ONE_PASS:-1}" == 1 ]]; then
  step one-pass 400 env OUT="$OUT/one-pass" LOGS="$OUT/one-pass/logs" REBUILD=0 TESTS=0 PROFILE=1 scripts/gpu/one-pass.sh
  tail -3 "$OUT/one-pass/summary.txt" | tee -a "$SUM"
fi
