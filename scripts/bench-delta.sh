#!/usr/bin/env bash
# Delta sync against full syncs on host memory, every byte verified: each pull engine run
# full and with --delta at one update density, alternately (ROUNDS pairs, so that a slow
# stretch of a shared machine falls on both), each run a separate job of the same layout.
# Writes results/cpu/delta/<name>-{full,delta}-<k>.{json,txt} and <name>-summary.txt: per
# engine the median sync time of each mode, their ratio, and the bytes moved against full.
# Usage: scripts/bench-delta.sh NAME NP ROUNDS DENSITY [bench args...]
#   (BUILD=build, OUT_DIR=results/cpu/delta, MPIRUN_ARGS: more mpirun flags)
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 4 ]] || { echo "usage: $0 NAME NP ROUNDS DENSITY [bench args...]" >&2; exit 2; }
name="$1" np="$2" rounds="$3" density="$4"; shift 4
ss="${BUILD:-build}/apps/shardsync"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
out="${OUT_DIR:-results/cpu/delta}"
mkdir -p "$out"
for k in $(seq 1 "$rounds"); do
  for mode in full delta; do
    flags=(--update-density "$density")
    [[ $mode == delta ]] && flags+=(--delta)
    cmd=(mpirun --oversubscribe ${MPIRUN_ARGS:-} -np "$np" "$ss" bench "$@" "${flags[@]}" --json "$out/$name-$mode-$k.json")
    echo "== $name $mode $k/$rounds: ${cmd[*]}" >&2
    { echo "# command: ${cmd[*]}"; "${cmd[@]}" -q 2>&1 | grep -v "UCX  WARN"; } > "$out/$name-$mode-$k.txt"
  done
done
python3 - "$out" "$name" "$rounds" <<'PY' | tee "$out/$name-summary.txt"
import json, statistics, sys
out, name, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
runs = {m: [json.load(open("%s/%s-%s-%d.json" % (out, name, m, k))) for k in range(1, rounds + 1)] for m in ("full", "delta")}
first = runs["delta"][0]
print("# %s: %s, commit %s, host %s, %d pairs of runs (full, then --delta), update density %s (%s)" % (
    name, first["config"]["model"], first["git_sha"], first["host"], rounds, first["config"]["update_density"],
    first["config"]["update_pattern"]))
print("# engine     full_s   delta_s  delta/full  moved_MB  full_MB  moved/full  index_MB  detect_s  wrong")
for eng in [e["engine"] for e in first["engines"]]:
    def rows(m):
        return [next(e for e in r["engines"] if e["engine"] == eng) for r in runs[m]]
    f, d = rows("full"), rows("delta")
    tf = statistics.median(e["time_s"]["avg"] for e in f)
    td = statistics.median(e["time_s"]["avg"] for e in d)
    moved = statistics.median(e["bytes_moved"] for e in d)
    full = statistics.median(e["delta"]["full_bytes"] for e in d)
    index = statistics.median(e["delta"]["index_bytes"] for e in d)
    det = statistics.median(e["delta"]["detect_s"] for e in d)
    wrong = sum(e["wrong"] for e in f + d)
    print("  %-9s %8.4f %8.4f %10.3f %9.3f %8.3f %10.4f %9.3f %9.4f %6d" % (
        eng, tf, td, td / tf if tf > 0 else float("nan"), moved / 1e6, full / 1e6,
        moved / full if full > 0 else float("nan"), index / 1e6, det, wrong))
PY
