#!/usr/bin/env bash
# checksum_check.sh NP SHARDSYNC [bench args...]: `shardsync bench --checksum` under mpirun on NP
# local ranks (bounded by a timeout). Every pull engine row must have compared checksums of
# every sync (pieces > 0, the same count each sync), none differing, with the trainers' and the
# inference ranks' hashing time reported; the broadcast row has none; the values verified too.
set -u
np="$1"; ss="$2"; shift 2
json=$(mktemp --suffix=.json)
trap 'rm -f "$json"' EXIT
out=$(timeout "${RUN_TIMEOUT:-240}" mpirun --oversubscribe -np "$np" "$ss" bench --checksum --syncs 2 --warmup 1 --json "$json" "$@" 2>&1)
rc=$?
fail() { echo "FAIL: $1"; echo "$out" | tail -30; exit 1; }
[[ $rc -eq 124 ]] && fail "timed out (hang)"
[[ $rc -ne 0 ]] && fail "exit status $rc"
python3 - "$json" <<'PY' || fail "the result JSON does not show every piece checksummed"
import json, sys
j = json.load(open(sys.argv[1]))
bad = []
pulls = 0
for e in j["engines"]:
    c, name = e["checksum"], e["engine"]
    if e["wrong"] != 0:
        bad.append(f"{name}: {e['wrong']} wrong elements")
    if name == "broadcast":
        if c["pieces"] != 0: bad.append(f"broadcast: {c['pieces']} pieces checksummed (it has none)")
        continue
    pulls += 1
    per_sync = [sum(r["checksum_pieces"] for r in s["ranks"] if r["role"] == "inference") for s in e["syncs"]]
    if c["pieces"] <= 0 or len(set(per_sync)) != 1 or per_sync[0] <= 0:
        bad.append(f"{name}: pieces compared per sync {per_sync}")
    if c["differ"] != 0: bad.append(f"{name}: {c['differ']} pieces differ")
    if not (c["trainer_hash_s"] > 0 and c["inference_hash_s"] > 0):
        bad.append(f"{name}: hashing time not reported ({c['trainer_hash_s']}, {c['inference_hash_s']})")
    print(f"{name}: {per_sync[0]} pieces a sync, 0 differ, trainers {c['trainer_hash_s']:.6f} s, inference ranks {c['inference_hash_s']:.6f} s hashing")
if pulls == 0: bad.append("no pull engine ran")
for b in bad: print("FAIL:", b)
sys.exit(1 if bad else 0)
PY
echo "ok: every piece of every pull engine checksummed and equal"
