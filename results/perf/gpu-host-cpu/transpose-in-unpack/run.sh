#!/bin/bash
# Device run at f7f3d72: transposes in the unpack + direct 32x64 tiles, vs 3db6961 (.carry/old).
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
R=$OUT/r; mkdir -p $R; t0=$SECONDS
(cmake -S . -B build-h -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDSYNC_UCX=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-h -j 10) > $R/build-new.log 2>&1 &
(cmake -S .carry/old -B build-old -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_TESTS=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-old -j 6 --target shardsync-microbench shardsync-kernel-bench) > $R/build-old.log 2>&1 &
wait; echo "builds $((SECONDS-t0)) s"
ls build-h/apps/shardsync-microbench build-old/apps/shardsync-microbench build-old/apps/shardsync-kernel-bench || { tail -30 $R/build-*.log; tar czf $OUT/r.tgz -C $OUT r; exit 1; }
grep -E "^-- shardsync" $R/build-new.log
lscpu | grep -E "Model name" > $R/cpu.txt; nvidia-smi -L >> $R/cpu.txt 2>&1
(cd build-h && timeout 300 ctest -j 8 --timeout 240 --output-on-failure -R "View|Kernels|Tensor|Schedule|gpu\.|pack_rounds|tp4_round|llama4") > $R/ctest.log 2>&1
grep -E "tests passed|Failed|\(Failed\)|Timeout" $R/ctest.log | tail -12; echo "ctest $((SECONDS-t0)) s"
for k in 1 2 3 4; do for v in old new; do B=build-old; [ $v = new ] && B=build-h
  timeout 60 $B/apps/shardsync-microbench --benchmark_filter='Copy/llama4' --benchmark_out=$R/ab-$v-$k.json --benchmark_out_format=json > /dev/null 2>&1; done; done
for k in 1 2; do for w in 64 128; do
  timeout 60 build-h/apps/shardsync-microbench --tile-width=$w --benchmark_filter='Copy/llama4' --benchmark_out=$R/tw$w-$k.json --benchmark_out_format=json > /dev/null 2>&1; done; done
echo "A/B $((SECONDS-t0)) s"
for i in 1 2 3 4 5; do timeout 100 build-h/apps/shardsync-microbench --benchmark_filter=BM_Copy --benchmark_out=$R/microbench-$i.json --benchmark_out_format=json > /dev/null 2>&1; done
echo "microbench $((SECONDS-t0)) s"
(cd results/perf/transpose-tiles && g++ -O2 -std=c++20 -o /tmp/xd xd.cpp && lscpu | grep -E "Model name|L1d|L2|L3" && for k in 1 2; do /tmp/xd 7; done) > $R/xd-xeon.txt 2>&1
echo "xd $((SECONDS-t0)) s"
for dev in cuda cpu; do for v in old new; do B=build-old; [ $v = new ] && B=build-h; reps=20; [ $dev = cpu ] && reps=3
  timeout 120 $B/apps/shardsync-kernel-bench -m llama-4-scout-17b-16e -i tp4 --device $dev --layers 1 --reps $reps --json $R/kb-$dev-$v.json > $R/kb-$dev-$v.txt 2>&1; echo "kb $dev $v rc=$? $((SECONDS-t0)) s"; tail -3 $R/kb-$dev-$v.txt; done; done
python3 - $R <<'PY'
import json,sys,glob
d=sys.argv[1]
def load(f):
    r={}
    for b in json.load(open(f))['benchmarks']:
        c,op=b['name'].split('/')[1:3]; r.setdefault(c,{})[op]=b['real_time']
    return r
for v in ('old','new','tw64','tw128'):
    rs=[load(f) for f in sorted(glob.glob(d+'/%s-*.json'%(v if v.startswith('tw') else 'ab-'+v)))]
    print(v, ' '.join('%s %s'%(op,[round(100*r['llama4_transpose']['memcpy']/r['llama4_transpose'][op]) for r in rs]) for op in ('pack','pack_each','unpack')))
rs=[load(f) for f in sorted(glob.glob(d+'/microbench-[0-9].json'))]
for c in rs[0]:
    line='%-18s'%c
    for op in ('pack','pack_each','unpack'):
        v=sorted(round(100*r[c]['memcpy']/r[c][op]) for r in rs)
        line+='  %s %s (med %d)'%(op, [round(100*r[c]['memcpy']/r[c][op]) for r in rs], v[len(v)//2])
    print(line)
PY
grep -A12 "pipelines" $R/xd-xeon.txt | tail -12
echo "done $((SECONDS-t0)) s"
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
