#!/usr/bin/env bash
# dedupe_check.sh NP SHARDSYNC [bench args...]
# Node-level dedupe (--dedupe-node) in a real run: `shardsync bench --dedupe-node` under mpirun
# on NP local ranks with pretend hosts (SHARDSYNC_FAKE_HOSTS, set by the caller), every engine,
# and its JSON checked per pull engine:
#   - every element verified (wrong = 0), nothing lost to a dead puller;
#   - EXPECT_HOSTS="H:B,H:B": each node's network bytes per sync (its ranks' pulls from the
#     trainers, the plan's bytes), exactly; a node is named by its lowest world rank;
#   - EXPECT_NODE=B: bytes copied inside the nodes per sync, exactly ("+": more than 0);
#   - network + in-node bytes = what the same ranks take in without dedupe (EXPECT_FULL=B);
#   - every timed sync, every inference rank: its network bytes plus the bytes copied to it
#     inside its node equal its plan's copy bytes, as `shardsync plan record` writes them offline
#     for the same model, layouts and --quant (no run involved).
# KEEP_JSON=PATH keeps the run's JSON result there (the GPU scripts commit it).
set -u
np="$1"; ss="$2"; shift 2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# The plan's per-rank copy bytes, recorded offline from the run's model and layout flags.
plan_args=()
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    -m|--model|-l|--layout|-t|--trainer|-i|--inference|-r|--replicas|--quant) plan_args+=("${args[i]}" "${args[i+1]}"); i=$((i + 1)) ;;
  esac
done
"$ss" plan record "${plan_args[@]}" -o "$dir/plan.h5" >/dev/null 2>&1 || { echo "FAIL: plan record ${plan_args[*]}"; exit 1; }
"$ss" plan show "$dir/plan.h5" > "$dir/plan.txt" || { echo "FAIL: plan show"; exit 1; }
out=$(timeout "${RUN_TIMEOUT:-240}" mpirun --oversubscribe -np "$np" "$ss" bench --dedupe-node --json "$dir/out.json" "$@" 2>&1)
rc=$?
fail() { echo "FAIL: $1"; echo "$out" | tail -30; exit 1; }
[[ $rc -eq 124 ]] && fail "timed out (hang)"
[[ $rc -ne 0 ]] && fail "exit status $rc"
python3 - "$dir/out.json" "${EXPECT_HOSTS:-}" "${EXPECT_NODE:-+}" "${EXPECT_FULL:-}" "$dir/plan.txt" <<'EOF' || fail "the JSON does not hold"
import json, sys
j = json.load(open(sys.argv[1]))
hosts, node, full = sys.argv[2], sys.argv[3], sys.argv[4]
# plan show: "rank tp pp dp moe params entries fills copy_bytes param_bytes", one row a replica rank.
plan = [int(l.split()[8]) for l in open(sys.argv[5]) if l.strip() and not l.startswith("#")]
want = {int(h): int(b) for h, b in (x.split(":") for x in hosts.split(","))} if hosts else None
ok = True
def bad(msg):
    global ok
    ok = False
    print("FAIL:", msg)
assert j["config"]["dedupe_node"] is True
engines = [e for e in j["engines"] if e["engine"] != "broadcast"]
if not engines:
    bad("no pull engine ran")
for e in engines:
    name = e["engine"]
    if e["wrong"] != 0: bad("%s: %d wrong elements" % (name, e["wrong"]))
    if e["node_lost_bytes"] != 0: bad("%s: %d bytes lost" % (name, e["node_lost_bytes"]))
    got = {h["host"]: h["network_bytes"] for h in e["host_network_bytes"]}
    if want is not None and got != want: bad("%s: network bytes per node %s, expected %s" % (name, got, want))
    if node == "+":
        if e["node_bytes"] <= 0: bad("%s: nothing copied inside a node" % name)
    elif e["node_bytes"] != int(node): bad("%s: %d bytes copied inside the nodes, expected %s" % (name, e["node_bytes"], node))
    if full and e["network_bytes"] + e["node_bytes"] != int(full):
        bad("%s: %d network + %d in-node bytes, expected %s in all" % (name, e["network_bytes"], e["node_bytes"], full))
    # Every timed sync, every inference rank: its own bytes add up to its plan's. Inference
    # ranks follow the trainers in world order, replica after replica: the i-th is the plan's
    # rank i mod the replica's size.
    for s in e["syncs"]:
        inf = sorted((r for r in s["ranks"] if r["role"] == "inference"), key=lambda r: r["rank"])
        if len(inf) % len(plan) != 0: bad("%s sync %d: %d inference ranks, plan has %d a replica" % (name, s["index"], len(inf), len(plan)))
        for i, r in enumerate(inf):
            if r["mismatches"] != 0: bad("%s sync %d rank %d: wrong" % (name, s["index"], r["rank"]))
            took, owed = r["network_bytes"] + r["node_bytes"], plan[i % len(plan)]
            if took != owed:
                bad("%s sync %d rank %d: %d network + %d in-node bytes, its plan's copy bytes are %d"
                    % (name, s["index"], r["rank"], r["network_bytes"], r["node_bytes"], owed))
    print("ok: %s network %s, in node %d, per node %s" % (name, e["network_bytes"], e["node_bytes"], got))
sys.exit(0 if ok else 1)
EOF
echo "$out" | grep -qE "^# dedupe-node: " || fail "no dedupe-node line in the run's header"
[[ -z "${KEEP_JSON:-}" ]] || cp "$dir/out.json" "$KEEP_JSON"
echo "ok"
