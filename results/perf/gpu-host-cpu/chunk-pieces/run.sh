#!/bin/bash
R=$OUT/r; mkdir -p $R; t0=$SECONDS
(cmake -S . -B build-h -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDSYNC_UCX=OFF -DSHARDSYNC_CUDA=OFF -DSHARDSYNC_BUILD_TESTS=OFF && cmake --build build-h -j 16 --target shardsync-microbench) > $R/build.log 2>&1 || { tail -30 $R/build.log; exit 1; }
echo "build $((SECONDS-t0)) s"
lscpu | grep -E "Model name" > $R/cpu.txt
for i in 1 2 3 4 5; do timeout 100 build-h/apps/shardsync-microbench --benchmark_filter=BM_Copy --benchmark_out=$R/microbench-$i.json --benchmark_out_format=json > /dev/null 2>&1; done
python3 - $R <<'PY'
import json,sys,glob
rs=[]
for f in sorted(glob.glob(sys.argv[1]+'/microbench-[0-9].json')):
    r={}
    for b in json.load(open(f))['benchmarks']:
        c,op=b['name'].split('/')[1:3]; r.setdefault(c,{})[op]=b['real_time']
    rs.append(r)
for c in rs[0]:
    line='# %-17s'%c
    for op in ('pack','pack_each','unpack'):
        v=[round(100*r[c]['memcpy']/r[c][op]) for r in rs]; s=sorted(v)
        line+=' %s %s (%d)'%(op, ' '.join('%3d'%x for x in v), s[len(s)//2])
    print(line)
PY
tar czf $OUT/r.tgz -C $OUT r && rm -rf $R
