#!/usr/bin/env bash
# Run from the repository root as .carry/diag.sh (an ignored folder carried to the GPU host),
# with .carry/ucx from scripts/gpu/ucx-wheel.sh, at the commit this folder names.
cd "$(dirname "$0")/.."
R=${R:-/tmp/r}; mkdir -p $R/logs
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_NVLS_ENABLE=0
U=$(pwd)/.carry/ucx/libucx
export LD_LIBRARY_PATH=$U/lib
t0=$SECONDS
cmake -S . -B build-ucx -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=ON -DSHARDSYNC_UCX_ROOT=$U -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > $R/logs/build.log 2>&1 && cmake --build build-ucx -j 16 >> $R/logs/build.log 2>&1 || { echo build failed; tail -20 $R/logs/build.log; exit 1; }
echo "build $((SECONDS-t0)) s"
SS=build-ucx/apps/shardsync
probe() { # name env...
  local n=$1; shift
  t0=$SECONDS
  env UCX_PROTO_INFO=y "$@" timeout 45 mpirun -np 2 --bind-to none -x LD_LIBRARY_PATH -x UCX_PROTO_INFO $(for e in "$@"; do echo -x ${e%%=*}; done) $SS bench --memory cuda -m qwen3-0.6b -t tp1 -i tp1 --transport ucx --measure-link 3 --send-buffer 256M --recv-buffer 256M --chunk 128M -e v4 --syncs 1 --warmup 0 > $R/logs/probe-$n.log 2>&1
  echo "probe $n rc=$? $((SECONDS-t0)) s: $(grep -E '^  v4 ' $R/logs/probe-$n.log | head -1)"
  grep -A6 "remote memory read by ucp_get\* into cuda" $R/logs/probe-$n.log | grep -E "^\[.*\| [0-9]" | sed 's/^\[[^]]*\]//' | sort -u | head -6
  grep -E "ERROR|rror" $R/logs/probe-$n.log | head -3
}
probe default
probe cache-on UCX_MEMTYPE_CACHE=y
