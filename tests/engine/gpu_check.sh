#!/usr/bin/env bash
# gpu_check.sh [--expect-fail] NP SHARDSYNC args...
# Runs an mpirun GPU test: exits 77 (CTest: skipped) with the reason where there is no GPU
# or no CUDA build, 1 where the driver lists a GPU that CUDA cannot use, else bench_check.sh
# (or, with --expect-fail, checks that verification fails, for the corrupted-transfer test).
set -u
expect_fail=0
if [[ "$1" == "--expect-fail" ]]; then expect_fail=1; shift; fi
np="$1"; ss="$2"; shift 2
info=$("$ss" info 2>&1)
if ! grep -q "^cuda  *yes" <<<"$info"; then echo "SKIP: this build has no CUDA"; exit 77; fi
if grep -q "^gpus  *0" <<<"$info"; then
  # A GPU the driver lists (or nvidia-smi shows) but CUDA cannot use is a defect, not a skip.
  if ! grep -q "^driver_gpus  *0" <<<"$info" || nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
    echo "FAIL: a GPU is listed but CUDA sees none: $(grep '^cuda_error' <<<"$info")"; exit 1
  fi
  echo "SKIP: no GPU visible on this machine ($(grep '^cuda_error' <<<"$info"))"; exit 77
fi
here="$(cd "$(dirname "$0")" && pwd)"
if [[ $expect_fail == 1 ]]; then
  exec "$here/../cli/expect.sh" fail "verification failed in v3 sync 1 .*1 wrong elements" -- \
    mpirun --oversubscribe -np "$np" "$ss" "$@"
fi
exec "$here/bench_check.sh" "$np" "$ss" "$@"
