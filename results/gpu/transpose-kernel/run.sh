#!/bin/bash
# Device run: tiled GPU transposes (kernels/device_kernels.cu) — tests and kernel bench.
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R; t0=$SECONDS
(cmake -S . -B build-h -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-h -j 16) > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
echo "build $((SECONDS-t0)) s"; grep -E "^-- shardsync" $R/build.log
lscpu | grep -E "Model name" > $R/cpu.txt; nvidia-smi -L >> $R/cpu.txt 2>&1
(cd build-h && timeout 300 ctest -j 8 --timeout 240 --output-on-failure -R "View|Kernels|Tensor|Schedule|gpu\.|pack_rounds|tp4_round|llama4") > $R/ctest.log 2>&1
grep -E "Kernels|tests passed|Failed|\(Failed\)|Timeout" $R/ctest.log | tail -14; echo "ctest $((SECONDS-t0)) s"
for k in 1 2; do
  timeout 120 build-h/apps/shardsync-kernel-bench -m llama-4-scout-17b-16e -i tp4 --device cuda --layers 1 --reps 20 --json $R/kb-llama4-$k.json > $R/kb-llama4-$k.txt 2>&1; echo "kb rc=$?"; tail -3 $R/kb-llama4-$k.txt; done
timeout 120 build-h/apps/shardsync-kernel-bench -m qwen3-8b -i tp2 --device cuda --layers 8 --reps 20 --json $R/kb-cuda-qwen3-8b.json > $R/kb-cuda-qwen3-8b.txt 2>&1; tail -3 $R/kb-cuda-qwen3-8b.txt
echo "done $((SECONDS-t0)) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
