#!/usr/bin/env bash
# gpu_broken_setup.sh SS TEST_KERNELS GPU_CHECK DIR: where the NVIDIA driver lists a GPU that
# CUDA cannot use, the GPU tests fail instead of skipping (a broken setup is a defect, not a
# missing feature). The driver's list is faked with SHARDSYNC_NVIDIA_GPUS_DIR (a directory with
# one entry, as /proc/driver/nvidia/gpus has one per GPU). Skips where CUDA works (the path
# cannot be reached there) or is not built.
set -u
ss="$1"; tk="$2"; gpu_check="$3"; dir="$4"
info=$("$ss" info 2>&1)
grep -q "^cuda  *yes" <<<"$info" || { echo "SKIP: this build has no CUDA"; exit 77; }
grep -q "^gpus  *0" <<<"$info" || { echo "SKIP: CUDA works on this machine: a broken setup cannot be shown"; exit 77; }
nvidia-smi -L 2>/dev/null | grep -q "^GPU " && { echo "SKIP: nvidia-smi lists a GPU here: the real case, not a fake"; exit 77; }
# Without the fake: the GPU tests skip.
"$gpu_check" 2 "$ss" -m tiny-qwen3 -t tp1 -i tp1 --memory cuda --syncs 1 --warmup 0 -q > /dev/null 2>&1
rc=$?
[[ $rc == 77 ]] || { echo "FAIL: gpu_check.sh without a listed GPU: exit $rc, expected 77"; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/0000:00:00.0"
export SHARDSYNC_NVIDIA_GPUS_DIR="$dir"
grep -q "^driver_gpus 1" <<<"$("$ss" info 2>&1)" || { echo "FAIL: shardsync info does not show the listed GPU"; "$ss" info; exit 1; }
out=$("$tk" --gtest_filter=Kernels.WideAccessesOnAlignedRuns 2>&1)
rc=$?
[[ $rc != 0 ]] && grep -q "listed by the driver, but CUDA" <<<"$out" ||
  { echo "FAIL: test_kernels with a listed GPU CUDA cannot use: exit $rc"; echo "$out"; exit 1; }
out=$("$gpu_check" 2 "$ss" -m tiny-qwen3 -t tp1 -i tp1 --memory cuda --syncs 1 --warmup 0 -q 2>&1)
rc=$?
[[ $rc == 1 ]] && grep -q "FAIL: a GPU is listed but CUDA sees none" <<<"$out" ||
  { echo "FAIL: gpu_check.sh with a listed GPU CUDA cannot use: exit $rc"; echo "$out"; exit 1; }
echo "ok: a listed GPU that CUDA cannot use fails the GPU tests; without one they skip"
