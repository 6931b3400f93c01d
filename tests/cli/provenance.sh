#!/usr/bin/env bash
# provenance.sh SHARDSYNC: a result's JSON names the commit the binary was built from and
# every library's version, and `shardsync info` prints the same.
set -u
ss="$1"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
timeout 120 mpirun --oversubscribe -np 2 "$ss" sync -m tiny-llama -t tp1 -i tp1 --syncs 1 --warmup 0 -q --json "$d/r.json" \
  >"$d/log" 2>&1 || { echo "FAIL: the run failed"; tail -20 "$d/log"; exit 1; }
"$ss" info >"$d/info" 2>&1 || { echo "FAIL: shardsync info failed"; cat "$d/info"; exit 1; }
python3 - "$d/r.json" "$d/info" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
info = dict(l.split(" ", 1) for l in open(sys.argv[2]).read().splitlines() if " " in l)
bad = []
libs = j.get("libraries", {})
for k in ("mpi", "hdf5", "compiler", "ucx", "nccl", "cuda_runtime"):
    v = libs.get(k)
    if not v: bad.append("no library %s in the JSON" % k)
    elif any(ord(c) < 32 for c in v): bad.append("library %s has control characters: %r" % (k, v))
    elif info.get(k) != v: bad.append("info says %s %r, the JSON %r" % (k, info.get(k), v))
if not j.get("git_sha") or j["git_sha"] != info.get("commit"):
    bad.append("git_sha %r, info's commit %r" % (j.get("git_sha"), info.get("commit")))
if bad: sys.exit("FAIL: " + "; ".join(bad))
print("ok: commit %s; %s" % (j["git_sha"], ", ".join("%s %s" % (k, libs[k]) for k in sorted(libs))))
PY
