#!/usr/bin/env bash
# UCX on GPU memory, on the GPU host: builds against a CUDA-enabled UCX (the libucx-cu13
# wheel unpacked by scripts/gpu/ucx-wheel.sh, or a site UCX), runs every test of that build
# (the GPU-memory UCX tests included: gpu.ucx*, gpu.cuda_ipc_ucx_hosts, gpu.failure_*_ucx),
# then benchmarks each UCX path against CUDA IPC on the same model in this one launch:
#   ucx        --transport ucx (UCX picks its CUDA IPC transport inside the node)
#   hosts      ranks pretend to sit on two hosts (SHARDSYNC_FAKE_HOSTS): cuda_ipc+ucx
#   tcp        UCX_TLS=tcp,cuda_copy (no GPUDirect RDMA: staged through host memory)
#
#   UCX_PREFIX=.carry/ucx/libucx OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/ucx-cuda.sh
# CTEST=0 leaves the tests out (CTEST_REGEX picks some); BENCH=0 the benchmarks; BIG=1 adds Qwen3-8B.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/ucx-cuda}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
UCX_PREFIX="$(cd "${UCX_PREFIX:-.carry/ucx/libucx}" && pwd)" || { say "# FAILED: no UCX prefix"; exit 1; }
export -n UCX_PREFIX  # the script's own; UCX warns of UCX_* variables it does not know
export LD_LIBRARY_PATH="$UCX_PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
say "# UCX on GPU memory, $(date -u +%Y-%m-%dT%H:%MZ), git $(source_commit)"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
say "# UCX prefix $UCX_PREFIX (wheel version $(cat "$UCX_PREFIX/UCX_WHEEL_VERSION.txt" 2>/dev/null || echo '?'))"
if [[ -x "$UCX_PREFIX/bin/ucx_info" ]]; then
  step ucx-info 60 bash -c "'$UCX_PREFIX/bin/ucx_info' -v && '$UCX_PREFIX/bin/ucx_info' -d"
  grep -E "Library version|Transport:" "$LOGS/ucx-info.log" | sort -u | sed 's/^#* */# /' | tee -a "$SUM"
fi

step build 600 bash -c "cmake -S . -B build-ucx -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=ON -DSHARDSYNC_UCX_ROOT='$UCX_PREFIX' \
  -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-ucx -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
grep -E "^-- shardsync" "$LOGS/build.log" | tee -a "$SUM"
SS=build-ucx/apps/shardsync
if [[ "${CTEST:-1}" == 1 ]]; then
  step ctest 900 bash -c "cd build-ucx && ctest -j 8 --output-on-failure --timeout 600 ${CTEST_REGEX:+-R \"$CTEST_REGEX\"}"
  grep -E "tests passed|Failed|Skipped|\*\*\*|gpu\.(ucx|cuda_ipc_ucx|failure)" "$LOGS/ctest.log" | tail -25 | tee -a "$SUM"
  cp "$LOGS/ctest.log" "$OUT/ctest.log"
fi
[[ "${BENCH:-1}" == 1 ]] || exit 0

# Which UCX transports carry the reads: the endpoints' lanes (SHARDSYNC_UCX_INFO=1) and the
# protocol chosen per operation and memory type (UCX_PROTO_INFO=y), on a tiny model.
step ucx-lanes 120 mpirun -np 2 --bind-to none -x LD_LIBRARY_PATH -x SHARDSYNC_UCX_INFO=1 -x UCX_PROTO_INFO=y $SS sync \
  --memory cuda -m tiny-llama -t tp1 -i tp1 --transport ucx -e v4 --syncs 1 --warmup 0 -q
cp "$LOGS/ucx-lanes.log" "$OUT/ucx-lanes.log"
grep -E "lane\[|remote memory read|software emulation|zero-copy" "$LOGS/ucx-lanes.log" | sort -u | head -20 | sed 's/^/# /' | tee -a "$SUM"
# The same with UCX's own default for cuda_ipc gets (shardsync asks for them: ucx_transport.cpp).
step ucx-lanes-auto 120 mpirun -np 2 --bind-to none -x LD_LIBRARY_PATH -x SHARDSYNC_UCX_INFO=1 -x UCX_PROTO_INFO=y \
  -x UCX_CUDA_IPC_ENABLE_GET_ZCOPY=auto $SS sync --memory cuda -m tiny-llama -t tp1 -i tp1 --transport ucx -e v4 --syncs 1 --warmup 0 -q
cp "$LOGS/ucx-lanes-auto.log" "$OUT/ucx-lanes-auto.log"
grep -E "remote memory read|software emulation|zero-copy" "$LOGS/ucx-lanes-auto.log" | sort -u | head -12 | sed 's/^/# auto: /' | tee -a "$SUM"

# One model per pair of runs, CUDA IPC first; every engine, every byte verified.
run() {  # name np env... -- bench args...; SYNCS timed syncs (default 3)
  local name="$1" np="$2"; shift 2
  local env=()
  while [[ "$1" != -- ]]; do env+=(-x "$1"); shift; done
  shift
  step "$name" 600 mpirun -np "$np" --bind-to none -x LD_LIBRARY_PATH "${env[@]}" $SS bench --memory cuda \
    --syncs "${SYNCS:-3}" --warmup 1 -q --json "$OUT/$name.json" "$@"
  grep -E "^# model .*transport|^  [a-z0-9]+ +[0-9]+ " "$LOGS/$name.log" | tee -a "$SUM"
}
# Qwen3-0.6B by default: UCX_TLS=tcp,cuda_copy stages GPU memory through the host at about
# 0.5 GB/s here, minutes per engine for Qwen3-8B. BIG=1 adds Qwen3-8B on the other paths (UCX
# gets through cuda_ipc since 9b0fa04; before, software emulation at about 0.8 GB/s).
small=(--send-buffer 256M --recv-buffer 256M --chunk 128M)
run qwen3-0.6b-tp1-tp1-cuda_ipc 2 -- -m qwen3-0.6b -t tp1 -i tp1 --transport cuda_ipc --measure-link 3 "${small[@]}"
run qwen3-0.6b-tp1-tp1-ucx 2 -- -m qwen3-0.6b -t tp1 -i tp1 --transport ucx --measure-link 3 "${small[@]}"
run qwen3-0.6b-tp1-tp1-ucx-tcp 2 UCX_TLS=tcp,cuda_copy -- -m qwen3-0.6b -t tp1 -i tp1 --transport ucx --measure-link 3 "${small[@]}"
# Three ranks on two pretend hosts: trainer and inference rank 0 on one, inference rank 1 on
# the other (its pulls go through UCX on GPU memory).
run qwen3-0.6b-tp1-tp2-cuda_ipc 3 -- -m qwen3-0.6b -t tp1 -i tp2 --transport cuda_ipc "${small[@]}"
run qwen3-0.6b-tp1-tp2-hosts 3 SHARDSYNC_FAKE_HOSTS=2 -- -m qwen3-0.6b -t tp1 -i tp2 --transport cuda_ipc+ucx "${small[@]}"
[[ "${BIG:-0}" == 1 ]] || exit 0
big=(--send-buffer 1G --recv-buffer 1G --chunk 256M --bucket 1G)
run qwen3-8b-tp1-tp1-cuda_ipc 2 -- -m qwen3-8b -t tp1 -i tp1 --transport cuda_ipc --measure-link 10 "${big[@]}"
run qwen3-8b-tp1-tp1-ucx 2 -- -m qwen3-8b -t tp1 -i tp1 --transport ucx --measure-link 10 "${big[@]}"
run qwen3-8b-tp1-tp2-hosts 3 SHARDSYNC_FAKE_HOSTS=2 -- -m qwen3-8b -t tp1 -i tp2 --transport cuda_ipc+ucx "${big[@]}"
