#!/usr/bin/env bash
# needs_gpu.sh SHARDSYNC [command...]: runs the command where SHARDSYNC can use a GPU. Exits
# 77 (CTest: skipped) with the reason where there is no GPU or no CUDA build, and 1 where the
# driver lists a GPU that CUDA cannot use (a defect, not a missing feature). Without a
# command, only the check.
set -u
ss="$1"; shift
info=$("$ss" info 2>&1)
if ! grep -q "^cuda  *yes" <<<"$info"; then echo "SKIP: this build has no CUDA"; exit 77; fi
if grep -q "^gpus  *0" <<<"$info"; then
  if ! grep -q "^driver_gpus  *0" <<<"$info" || nvidia-smi -L 2>/dev/null | grep -q "^GPU "; then
    echo "FAIL: a GPU is listed but CUDA sees none: $(grep '^cuda_error' <<<"$info")"; exit 1
  fi
  echo "SKIP: no GPU visible on this machine ($(grep '^cuda_error' <<<"$info"))"; exit 77
fi
[[ $# -gt 0 ]] || exit 0
exec "$@"
