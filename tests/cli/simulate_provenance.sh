#!/usr/bin/env bash
# simulate_provenance.sh SHARDSYNC: simulate --json records its provenance: the commit the
# binary was built from (the one `shardsync info` prints), the cluster file it read ("bundled:NAME"
# for one built in), and that file's own provenance.
set -u
ss="$1"
d=$(mktemp -d); trap 'rm -rf "$d"' EXIT
"$ss" simulate --layout qwen3-235b-published -e v3 --json "$d/sim.json" > "$d/out.txt" 2>&1 || { cat "$d/out.txt"; echo "FAIL: simulate"; exit 1; }
commit=$("$ss" info | awk '$1 == "commit" {print $2}')
python3 - "$d/sim.json" "$commit" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1]))
want = sys.argv[2]
bad = []
if j.get("git_sha") != want:
    bad.append(f"git_sha {j.get('git_sha')!r}, expected {want!r} (shardsync info's commit)")
cf = j.get("cluster_file") or ""
if not (cf.startswith("bundled:") or os.path.exists(cf)):
    bad.append(f"cluster_file {cf!r}: neither a bundled cluster nor a file")
if "cluster_provenance" not in j:
    bad.append("no cluster_provenance")
if bad:
    print("FAIL: " + "; ".join(bad))
    sys.exit(1)
print(f"ok: git_sha {j['git_sha']}, cluster_file {j['cluster_file']}")
PY
