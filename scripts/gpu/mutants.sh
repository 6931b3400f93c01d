#!/usr/bin/env bash
# After one-pass.sh: a broken copy of the rows kernel (copy_rows stores the first of its four
# loaded units in every place) is built in a scratch tree; Kernels.StridedCopiesMatchCpuTwin
# must fail on it, as the committed kernel passes it in one-pass.sh's ctest.
#   OUT=/tmp/out LOGS=/tmp/logs SUM_MODE=append scripts/gpu/mutants.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source scripts/gpu/common.sh
tree=/tmp/mutant-rows
rm -rf "$tree" && mkdir -p "$tree" && cp -r CMakeLists.txt cmake lib kernels apps tests configs "$tree"/
sed -i 's/ \* ud) = v\[k\];/ * ud) = v[0];/' "$tree/kernels/device_kernels.cu"
if cmp -s kernels/device_kernels.cu "$tree/kernels/device_kernels.cu"; then say "# mutant: the patch changed nothing"; exit 1; fi
step build-mutant 400 bash -c "cmake -S $tree -B $tree/build -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF \
  -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build $tree/build -j $(nproc) --target test_kernels"
step mutant-test 120 "$tree/build/tests/test_kernels" --gtest_filter='Kernels.StridedCopies*'
rc=$?
grep -E "FAILED|PASSED|Failure" "$LOGS/mutant-test.log" | head -4 | tee -a "$SUM"
if [[ $rc != 0 ]] && grep -q "Failure" "$LOGS/mutant-test.log"; then  # failed on a wrong value, not to run
  expected_failure mutant-test
  say "# mutant (copy_rows stores v[0]): caught (exit $rc), as it must be"
else
  [[ $rc == 0 ]] && FAILED_STEPS+=("mutant-test (the mutant passed)")
  say "# mutant: NOT caught (exit $rc)"
fi
