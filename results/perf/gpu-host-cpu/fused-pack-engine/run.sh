#!/bin/bash
# Engine-level A/B of the fused pack on the GPU host's CPU (host memory, 5 ranks on 16 cores):
# this tree vs 33e4b38 (.carry/old), mid-qwen3-moe, trainer EP1 -> inference TP4.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/eng; mkdir -p $R; t0=$SECONDS
cfg="-DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_CUDA=OFF -DSHARDSYNC_BUILD_TESTS=OFF -DSHARDSYNC_BUILD_BENCH=OFF"
(cmake -S . -B build-new $cfg && cmake --build build-new -j 8 --target shardsync) > $R/build-new.log 2>&1 &
(cmake -S .carry/old -B build-old $cfg && cmake --build build-old -j 8 --target shardsync) > $R/build-old.log 2>&1 &
wait; echo "builds $((SECONDS-t0)) s"; ls build-new/apps/shardsync build-old/apps/shardsync || { tail -20 $R/build-*.log; exit 1; }
lscpu | grep "Model name" > $R/cpu.txt
for k in 1 2; do for v in old new; do
  timeout 150 mpirun -np 5 --bind-to core build-$v/apps/shardsync bench -m mid-qwen3-moe -t ep1 -i tp4 -e v2,v3 -n 2 -w 1 -q --json $R/$v-$k.json > $R/$v-$k.txt 2>&1
  echo "$v $k rc=$? $((SECONDS-t0)) s"; grep -E "^  v[23] " $R/$v-$k.txt
done; done
tar czf $OUT/eng.tgz -C $OUT eng && rm -rf $R
