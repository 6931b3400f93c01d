#!/usr/bin/env bash
# Node-level dedupe against full syncs on host memory, every byte verified: the pull engines run
# without and with --dedupe-node alternately (ROUNDS pairs), ranks pretending to sit on nodes of
# FAKE_HOSTS world ranks each (SHARDSYNC_FAKE_HOSTS). For a layout of one replica at DPn/EPn
# (DP attention), the summary sets each node's measured network bytes beside the arithmetic: a
# node with k of the n inference ranks takes in R + kE/n deduped and k(R + E/n) without (R: the
# bytes every rank needs whole, E: the experts, from `shardsync model show --tensors`).
# Writes OUT_DIR/<name>-{full,dedupe}-<k>.{json,txt} and <name>-summary.txt.
# Usage: scripts/bench-dedupe.sh NAME NP FAKE_HOSTS ROUNDS [bench args...]
#   (BUILD=build, OUT_DIR=results/cpu/dedupe, MPIRUN_ARGS: more mpirun flags)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 4 ]] || { echo "usage: $0 NAME NP FAKE_HOSTS ROUNDS [bench args...]" >&2; exit 2; }
name="$1" np="$2" hosts="$3" rounds="$4"; shift 4
ss="${BUILD:-build}/apps/shardsync"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 SHARDSYNC_FAKE_HOSTS="$hosts"
out="${OUT_DIR:-results/cpu/dedupe}"
mkdir -p "$out"
for k in $(seq 1 "$rounds"); do
  for mode in full dedupe; do
    flags=()
    [[ $mode == dedupe ]] && flags+=(--dedupe-node)
    cmd=(mpirun --oversubscribe ${MPIRUN_ARGS:-} -np "$np" "$ss" bench "$@" "${flags[@]}" --json "$out/$name-$mode-$k.json")
    echo "== $name $mode $k/$rounds: SHARDSYNC_FAKE_HOSTS=$hosts ${cmd[*]}" >&2
    { echo "# command: SHARDSYNC_FAKE_HOSTS=$hosts ${cmd[*]}"; "${cmd[@]}" -q 2>&1 | grep -v "UCX  WARN"; } > "$out/$name-$mode-$k.txt"
  done
done
model=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["config"]["model"])' "$out/$name-dedupe-1.json")
experts=$("$ss" model show -m "$model" --tensors | awk '$4 ~ /^expert_/ { e += $NF } END { print e + 0 }')
python3 - "$out" "$name" "$rounds" "$experts" <<'PY' | tee "$out/$name-summary.txt"
import json, statistics, sys
out, name, rounds, experts = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
runs = {m: [json.load(open("%s/%s-%s-%d.json" % (out, name, m, k))) for k in range(1, rounds + 1)] for m in ("full", "dedupe")}
first = runs["dedupe"][0]
total = first["model_bytes"]
R, E = total - experts, experts
print("# %s: %s, commit %s, host %s, %d pairs of runs (full, then --dedupe-node), R = %d B, E = %d B" % (
    name, first["config"]["model"], first["git_sha"], first["host"], rounds, R, E))
# Which node each inference rank sits on, from a timed sync of the deduped run.
ranks = [r for r in first["engines"][0]["syncs"][-1]["ranks"] if r["role"] == "inference"]
n = len(ranks)
on = {}
for r in ranks: on[r["host"]] = on.get(r["host"], 0) + 1
print("# engine    full_s  dedupe_s  dedupe/full  node  ranks  network_B(full)  network_B(dedupe)  arithmetic_B(dedupe)  exact  in_node_B  wrong")
for eng in [e["engine"] for e in first["engines"]]:
    def rows(m): return [next(e for e in r["engines"] if e["engine"] == eng) for r in runs[m]]
    f, d = rows("full"), rows("dedupe")
    tf = statistics.median(e["time_s"]["avg"] for e in f)
    td = statistics.median(e["time_s"]["avg"] for e in d)
    wrong = sum(e["wrong"] for e in f + d)
    per = {h["host"]: h["network_bytes"] for h in d[0]["host_network_bytes"]}
    # Without dedupe every rank takes in its plan's bytes: per node, the sum over its ranks.
    full_per = {}
    for r in f[0]["syncs"][-1]["ranks"]:
        if r["role"] == "inference":
            h = next(x["host"] for x in ranks if x["rank"] == r["rank"])
            full_per[h] = full_per.get(h, 0) + r["network_bytes"]
    for i, h in enumerate(sorted(per)):
        k = on[h]
        want = R + k * E // n
        print("  %-8s %7.4f %9.4f %12.3f %5d %6d %16d %18d %21d %6s %10d %6d" % (
            eng if i == 0 else "", tf, td, td / tf if tf > 0 else float("nan"), h, k, full_per.get(h, 0), per[h], want,
            "yes" if per[h] == want else "NO", d[0]["node_bytes"], wrong))
PY
