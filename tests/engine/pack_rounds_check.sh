#!/usr/bin/env bash
# pack_rounds_check.sh SHARDSYNC JSON [bench args...]
# One trainer rank serving one inference replica of TP4 (5 local ranks): with every local
# rank's requests known (V2, V3 after their first sync), the trainer packs a round of
# chunks, one per local rank, in one launch, and the CPU copy runs the columns the ranks
# take of the same rows together. Checks, per timed sync: chunks packed in at most half as
# many launches (about a quarter), at least a sixth of the copy jobs run together (expert
# down_proj and o_proj are column slices under TP: 116 of 452; with a small send buffer,
# rounds packed in part and never caught up left V3 with 4-29 of 460), and no wrong byte. Extra
# arguments (e.g. a send buffer of a few chunks, where rounds wait for room to go whole)
# go to `shardsync bench`.
set -u
ss="$1"; json="$2"; shift 2
out=$(timeout "${RUN_TIMEOUT:-240}" mpirun --oversubscribe -np 5 "$ss" bench -m tiny-qwen3-moe -t ep1 -i tp4 \
      -e v2,v3 --syncs 2 --warmup 1 -q --json "$json" "$@" 2>&1)
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
            c, l, n, t = k["chunks_packed"], k["pack_launches"], k["pack_copies"], k["pack_copies_together"]
            what = "%s sync %d: %d chunks in %d launches, %d of %d copies together" % (e["engine"], s["index"], c, l, t, n)
            print(what)
            if c == 0 or 2 * l > c or 6 * t < n:
                bad.append(what)
if bad:
    print("FAIL: expected rounds of up to 4 chunks and a sixth of the copies or more together: " + "; ".join(bad))
    sys.exit(1)
PY
