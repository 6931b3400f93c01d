#!/usr/bin/env bash
# perf-repeat.sh N OUTDIR [perf-check.py flags...]
# Runs the performance gate N times (an unchanged build: how often it fails code that did not
# change, its false-alarm rate) and writes each run's output and report under OUTDIR, then
# OUTDIR/summary.txt: runs passed, and per metric the lowest and median relative speed seen
# against its threshold.
set -u
if [[ $# -lt 2 || ! $1 =~ ^[0-9]+$ || $1 -lt 1 ]]; then
  echo "usage: $0 N OUTDIR [perf-check.py flags...]  (N >= 1)" >&2
  exit 2
fi
n=$1; out=$2; shift 2
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" || exit 2
passed=0
for i in $(seq 1 "$n"); do
  python3 "$here/perf-check.py" "$@" --report "$out/run-$i.json" > "$out/run-$i.txt" 2>&1
  rc=$?
  echo "perf-repeat: run $i of $n: exit $rc ($(tail -1 "$out/run-$i.txt"))"
  [[ $rc -eq 0 ]] && passed=$((passed + 1))
  [[ $rc -eq 2 ]] && { echo "perf-repeat: run $i did not complete (exit 2): $out/run-$i.txt" >&2; exit 2; }
done
python3 - "$out" "$n" "$passed" <<'PY' | tee "$out/summary.txt"
import json, statistics, sys
out, n, passed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
runs = [json.load(open("%s/run-%d.json" % (out, i))) for i in range(1, n + 1)]
base = json.load(open(runs[0]["baseline"]))["metrics"]
print("# %d of %d gate runs passed (false alarms: %d); reference %s; %s" % (
    passed, n, n - passed, runs[0].get("reference", {}).get("commit", "?"), runs[0]["machine"]))
print("# %-34s %7s %7s %9s %6s %s" % ("metric", "lowest", "median", "threshold", "gated", "runs failed"))
for k in sorted(runs[0]["speeds"]):
    v = [r["speeds"][k] for r in runs if r["speeds"].get(k) is not None]
    b = base.get(k, {})
    failed = sum(1 for r in runs if k in r["regressed"])
    print("  %-34s %7.4f %7.4f %9s %6s %d" % (k, min(v), statistics.median(v), b.get("threshold", "-"),
                                             "yes" if b.get("gated") else "no", failed))
PY
