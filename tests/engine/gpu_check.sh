#!/usr/bin/env bash
# gpu_check.sh [--expect-fail | --expect-fail-with REGEX] NP SHARDSYNC args...
# Runs an mpirun GPU test where there is a GPU (needs_gpu.sh: else skipped, or failed where
# the driver lists a GPU that CUDA cannot use): bench_check.sh, or, with --expect-fail, a
# check that verification fails (the corrupted-transfer test), or that the run fails saying
# REGEX.
set -u
expect_fail=0
want="verification failed in v3 sync 1 .*1 wrong elements"
if [[ "$1" == "--expect-fail" ]]; then expect_fail=1; shift; fi
if [[ "$1" == "--expect-fail-with" ]]; then expect_fail=1; want="$2"; shift 2; fi
np="$1"; ss="$2"; shift 2
here="$(cd "$(dirname "$0")" && pwd)"
"$here/needs_gpu.sh" "$ss" || exit
if [[ $expect_fail == 1 ]]; then
  exec "$here/../cli/expect.sh" fail "$want" -- \
    mpirun --oversubscribe -np "$np" "$ss" "$@"
fi
exec "$here/bench_check.sh" "$np" "$ss" "$@"
