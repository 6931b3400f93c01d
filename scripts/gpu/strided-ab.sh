#!/usr/bin/env bash
# After one-pass.sh (its build-gpu tree): two checks of the strided copy kernel, each a
# rebuild of a patched copy of kernels/device_kernels.cu in a scratch tree:
#   mutant: a walked run forgets the destination's step: Kernels.StridedCopiesMatchCpuTwin must fail;
#   bounds: the strided kernel with __launch_bounds__(256, 3) (3 blocks per SM, 80 registers,
#           small spills) against the committed one (96 registers, no spills, 2 blocks), by the
#           kernel bench --ipc (strided pieces read through a CUDA IPC mapping).
#   OUT=/tmp/out LOGS=/tmp/logs SUM_MODE=append scripts/gpu/strided-ab.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/common.sh
prepare() {  # name sed-expression: /tmp/ab-<name>, a copy of the tree with the kernel patched
  local tree="/tmp/ab-$1"
  rm -rf "$tree" && mkdir -p "$tree" && cp -r CMakeLists.txt cmake lib kernels apps tests configs "$tree"/
  sed -i "$2" "$tree/kernels/device_kernels.cu"
  if cmp -s kernels/device_kernels.cu "$tree/kernels/device_kernels.cu"; then say "# $1: the patch changed nothing"; return 1; fi
}
build() {  # name: its test and kernel bench (the two variants build at once, half the cores each)
  local tree="/tmp/ab-$1"
  cmake -S "$tree" -B "$tree/build" -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build "$tree/build" -j $(( $(nproc) / 2 )) --target test_kernels shardsync-kernel-bench
}
prepare mutant 's/  d += next_d;/  d += 0;/' || exit 1
prepare bounds 's/^__global__ void jobs_kernel(/__global__ void __launch_bounds__(256, kStrided ? 3 : 1) jobs_kernel(/' || exit 1
export -f build
step build-variants 400 bash -c "build mutant > $LOGS/build-mutant.log 2>&1 & build bounds > $LOGS/build-bounds.log 2>&1; wait"
step mutant-test 120 /tmp/ab-mutant/build/tests/test_kernels --gtest_filter='Kernels.StridedCopies*'
rc=$?
grep -E "FAILED|PASSED|Failure" "$LOGS/mutant-test.log" | head -4 | tee -a "$SUM"
[[ $rc != 0 ]] && say "# mutant: caught (exit $rc), as it must be" || say "# mutant: NOT caught"
for rep in 1 2; do
  for v in committed bounds; do
    kb=build-gpu/apps/shardsync-kernel-bench
    [[ $v == bounds ]] && kb=/tmp/ab-bounds/build/apps/shardsync-kernel-bench
    step "kernels-ipc-$v-$rep" 200 $kb --model qwen3-8b --inference tp2 --device cuda --layers 36 --reps 10 --ipc \
      --json "$OUT/kernels-ipc-$v-$rep.json"
    tail -4 "$LOGS/kernels-ipc-$v-$rep.log" | sed "s/^/$v $rep /" | tee -a "$SUM"
  done
done
