#!/usr/bin/env bash
# gate_check.sh logic|slow-copy SOURCE_DIR BUILD_DIR
#   logic:     the gate's verdicts on given metric values against the committed baseline (no
#              timing): all at their baseline medians passes; one metric past its threshold
#              fails naming it and by how much; a baseline metric left unmeasured, and a
#              broken baseline, are refused naming the metric or field.
#   slow-copy: a deliberately slowed copy kernel (SHARDSYNC_TEST_SLOW_COPY=6: every pack and
#              unpack runs six times) must make the real gate fail on the copy ratios.
set -u
mode="$1"; src="$2"; build="$3"
gate=("$src/scripts/perf-check.py" --build "$build" --baseline "$src/results/perf-baseline.json")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
die() { echo "FAIL: $*"; exit 1; }

case "$mode" in
logic)
  python3 - "$src/results/perf-baseline.json" "$tmp" <<'PY' || die "could not derive metric files"
import json, sys
b = json.load(open(sys.argv[1]))["metrics"]
if len(b) < 10: sys.exit("baseline has only %d metrics" % len(b))
json.dump({k: m["median"] for k, m in b.items()}, open(sys.argv[2] + "/at-median.json", "w"))
bad = {k: m["median"] for k, m in b.items()}
bad["copy.expert_w13.pack"] = b["copy.expert_w13.pack"]["threshold"] * 0.5
bad["overhead.v1.memcpy_bytes"] = b["overhead.v1.memcpy_bytes"]["threshold"] * 3
json.dump(bad, open(sys.argv[2] + "/regressed.json", "w"))
partial = {k: m["median"] for k, m in b.items() if k != "engine.v3.vs_broadcast"}
json.dump(partial, open(sys.argv[2] + "/partial.json", "w"))
broken = {"metrics": {"copy.x.pack": {"threshold": "high", "median": 1}}}
json.dump(broken, open(sys.argv[2] + "/broken-baseline.json", "w"))
PY
  out=$(timeout 60 python3 "${gate[@]}" --metrics "$tmp/at-median.json" 2>&1); rc=$?
  [[ $rc -eq 0 ]] || die "metrics at the baseline medians: exit $rc: $out"
  grep -q "perf-check: passed" <<<"$out" || die "no pass line: $out"
  out=$(timeout 60 python3 "${gate[@]}" --metrics "$tmp/regressed.json" --report "$tmp/report.json" 2>&1); rc=$?
  [[ $rc -eq 1 ]] || die "regressed metrics: exit $rc, expected 1: $out"
  grep -Eq "copy.expert_w13.pack .*REGRESSED \(50.0% below threshold" <<<"$out" || die "pack regression not reported: $out"
  grep -Eq "overhead.v1.memcpy_bytes .*REGRESSED \(200.0% above threshold" <<<"$out" || die "overhead regression not reported: $out"
  grep -q "2 of .* metrics regressed" <<<"$out" || die "no summary line: $out"
  python3 -c "import json,sys; r=json.load(open('$tmp/report.json')); sys.exit(0 if sorted(r['regressed'])==['copy.expert_w13.pack','overhead.v1.memcpy_bytes'] else 1)" \
    || die "report JSON does not list the regressed metrics"
  out=$(timeout 60 python3 "$src/scripts/perf-check.py" --baseline "$tmp/broken-baseline.json" --metrics "$tmp/at-median.json" 2>&1); rc=$?
  [[ $rc -eq 2 ]] || die "broken baseline: exit $rc, expected 2: $out"
  grep -q "broken-baseline.json: metrics.copy.x.pack.threshold: expected a number" <<<"$out" || die "broken baseline message: $out"
  out=$(timeout 60 python3 "${gate[@]}" --metrics "$tmp/partial.json" 2>&1); rc=$?
  [[ $rc -eq 2 ]] || die "a baseline metric not measured: exit $rc, expected 2: $out"
  grep -q "metrics in the baseline were not measured: engine.v3.vs_broadcast" <<<"$out" || die "missing metric not named: $out"
  echo "ok: pass at medians, two regressions named, unmeasured metric and broken baseline refused"
  ;;
slow-copy)
  out=$(SHARDSYNC_TEST_SLOW_COPY=6 timeout 600 python3 "${gate[@]}" --only copy --attempts 2 2>&1); rc=$?
  [[ $rc -eq 1 ]] || die "slowed copy: exit $rc, expected 1 (regression): $out"
  n=$(grep -Ec "^  copy\.[a-z0-9_]+\.(pack|unpack) .*REGRESSED" <<<"$out")
  [[ $n -ge 8 ]] || die "slowed copy: only $n of 10 copy ratios reported as regressed: $out"
  echo "ok: slowed copy kernel fails the gate ($n copy ratios regressed)"
  ;;
*) die "unknown mode $mode" ;;
esac
