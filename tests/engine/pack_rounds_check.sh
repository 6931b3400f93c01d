#!/usr/bin/env bash
# pack_rounds_check.sh SHARDSYNC JSON
# One trainer rank serving one inference replica of TP4 (5 local ranks): with every local
# rank's requests known (V2, V3 after their first sync), the trainer packs a round of
# chunks, one per local rank, in one launch. Checks, per timed sync, that it packed chunks
# and took at most half as many launches (about a quarter), and that no byte was wrong.
set -u
ss="$1"; json="$2"
out=$(timeout "${RUN_TIMEOUT:-240}" mpirun --oversubscribe -np 5 "$ss" bench -m tiny-qwen3-moe -t ep1 -i tp4 \
      -e v2,v3 --syncs 2 --warmup 1 -q --json "$json" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: exit status $rc"; echo "$out" | tail -30; exit 1; }
python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
bad = []
for e in r["engines"]:
    for s in e["syncs"]:
        if s["warmup"]:
            continue
        for k in s["ranks"]:
            if k["mismatches"]:
                bad.append("%s sync %d rank %d: %d wrong" % (e["engine"], s["index"], k["rank"], k["mismatches"]))
            if k["role"] != "trainer":
                continue
            c, l = k["chunks_packed"], k["pack_launches"]
            print("%s sync %d: %d chunks in %d launches" % (e["engine"], s["index"], c, l))
            if c == 0 or 2 * l > c:
                bad.append("%s sync %d: %d chunks packed in %d launches (expected rounds of up to 4)" % (e["engine"], s["index"], c, l))
if bad:
    print("FAIL: " + "; ".join(bad))
    sys.exit(1)
PY
