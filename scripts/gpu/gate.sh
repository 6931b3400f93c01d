#!/usr/bin/env bash
# The GPU gate (issue 42): a base build and a candidate build made on the GPU host in one run and
# measured interleaved (base, candidate, candidate, base, ... PAIRS pairs), every byte verified;
# per case the verdict is a relative speed with its spread (scripts/gpu/gate_summary.py):
#   one-pass  v4, Qwen3-8B TP1 -> TP1 on CUDA memory: one-pass reads through CUDA IPC
#   fp8       the block-FP8 quantize kernel on a 8192 x 8192 bf16 matrix (shardsync-fp8-bench),
#             every code and scale against the CPU twin
#   moe       v3, mid-qwen3-moe trainer TP2/EP2 -> DP2/EP2 on CUDA memory: the trainers' TP and
#             EP gathers, then the pulls
# Run it whenever a change touches the GPU path, and commit each run (results/gpu/gate/).
#
#   scripts/gpu/gate.sh prepare BASE_COMMIT   (here, in the checkout: the base's sources into
#                                              .carry/base with its stamp; then make stamp)
#   BASE_DIR=.carry/base OUT=/tmp/out scripts/gpu/gate.sh   (on the GPU host; carry .carry/base
#                                              and .shardsync-commit)
set -uo pipefail
cd "$(dirname "$0")/../.."
if [[ "${1:-}" == prepare ]]; then
  base="${2:?usage: $0 prepare BASE_COMMIT}"
  sha=$(git rev-parse --short=12 "$base^{commit}") || exit 2
  rm -rf .carry/base && mkdir -p .carry/base && git archive "$sha" | tar -x -C .carry/base || exit 1
  src=$(cmake -DSRC="$PWD/.carry/base" -P cmake/SourceHash.cmake) || exit 1
  printf '%s\nsources %s\n' "$sha" "$src" > .carry/base/.shardsync-commit
  echo ".carry/base: $sha (sources $src); now make stamp, and carry .carry/base and .shardsync-commit"
  exit 0
fi
OUT="${OUT:-results/gpu/gate}"
LOGS="${LOGS:-$OUT/logs}"
BASE_DIR="${BASE_DIR:-.carry/base}"
PAIRS="${PAIRS:-5}"
source scripts/gpu/common.sh
[[ -f "$BASE_DIR/.shardsync-commit" ]] || { say "# $BASE_DIR: no base (scripts/gpu/gate.sh prepare BASE_COMMIT)"; exit 2; }
say "# GPU gate, $(date -u +%Y-%m-%dT%H:%MZ), candidate $(source_commit), base $(head -1 "$BASE_DIR/.shardsync-commit"), $PAIRS pairs"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
CFG="-DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DSHARDSYNC_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90"
TARGETS="--target shardsync shardsync-fp8-bench"
step build 600 bash -c "cmake -S . -B build-gpu $CFG && cmake --build build-gpu -j $(nproc) $TARGETS" ||
  { tail -40 "$LOGS/build.log"; exit 1; }
step build-base 600 bash -c "cmake -S $BASE_DIR -B $BASE_DIR/build-gpu $CFG && cmake --build $BASE_DIR/build-gpu -j $(nproc) $TARGETS" ||
  { tail -40 "$LOGS/build-base.log"; exit 1; }
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2 --syncs 5 --warmup 1 -q"
case_cmd() {  # case bin json
  case "$1" in
    one-pass) echo mpirun -np 2 --bind-to none "$2/shardsync" bench -m qwen3-8b -t tp1 -i tp1 --memory cuda -e v4 $BUF --json "$3" ;;
    fp8) echo "$2/shardsync-fp8-bench" --device cuda --rows 8192 --cols 8192 --reps 20 --json "$3" ;;
    moe) echo mpirun -np 4 --bind-to none "$2/shardsync" bench -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 --memory cuda -e v3 $BUF --json "$3" ;;
  esac
}
for ((p = 1; p <= PAIRS; p++)); do
  # Base first in odd pairs, candidate first in even ones: a drifting GPU weighs on both.
  order=(base new); (( p % 2 == 0 )) && order=(new base)
  for c in one-pass fp8 moe; do
    for side in "${order[@]}"; do
      bin=build-gpu/apps; [[ $side == base ]] && bin="$BASE_DIR/build-gpu/apps"
      step "$c-$side-$p" 300 $(case_cmd $c $bin "$OUT/$c-$side-$p.json")
    done
  done
done
python3 scripts/gpu/gate_summary.py "$OUT" "$PAIRS" | tee -a "$SUM"
[[ ${PIPESTATUS[0]} == 0 ]] || FAILED_STEPS+=("gate_summary (a wrong byte, a missing run or a regression)")
