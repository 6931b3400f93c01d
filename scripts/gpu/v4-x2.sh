#!/usr/bin/env bash
# V4 vs V3 on 2 x H200 (when that kind is lent): trainer ranks on GPU 0, inference ranks on
# GPU 1, pulls over NVLink (CUDA IPC). Run from the repo root with OUT set.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The build records the commit of .shardsync-commit (make stamp; cmake/GitSha.cmake).
nvidia-smi -L; nvidia-smi topo -m | head -4
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 > /tmp/b.log 2>&1 && cmake --build build-gpu -j 32 >> /tmp/b.log 2>&1 || { tail -30 /tmp/b.log; exit 1; }
SS=build-gpu/apps/shardsync
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2"
echo "## dense qwen3-8b tp1 -> tp1, trainer GPU0, inference GPU1"
timeout 300 mpirun -np 2 --bind-to none $SS bench -m qwen3-8b -t tp1 -i tp1 --memory cuda -e broadcast,v3,v4 --measure-link 10 --syncs 5 --warmup 1 $BUF -q --json $OUT/x2-qwen3-8b-tp1-tp1.json 2>&1 | grep -v "^ *[0-9]\+ " | tail -9
echo "## mid-qwen3-moe tp2,ep2 -> dp2,ep2, trainers GPU0, inference GPU1"
timeout 300 mpirun -np 4 --bind-to none $SS bench -m mid-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 --memory cuda -e v3,v4 --measure-link 10 --syncs 5 --warmup 1 $BUF -q --json $OUT/x2-moe-tp2ep2-dp2ep2.json 2>&1 | grep -v "^ *[0-9]\+ " | tail -8
