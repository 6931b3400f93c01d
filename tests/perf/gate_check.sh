#!/usr/bin/env bash
# gate_check.sh logic|slow-copy|slow-v3 SOURCE_DIR BUILD_DIR
#   logic:     the gate's verdicts on given relative speeds against the committed baseline (no
#              timing): every metric at 1.0 passes; two gated metrics under their thresholds
#              fail naming each and how much slower; a metric out of the gate does not fail;
#              a baseline metric left unmeasured, a broken baseline and bad flags are refused
#              naming the metric, field or flag.
#   slow-copy: the real gate, this build against itself, with every CPU pack/unpack of the
#              candidate 25% slower (SHARDSYNC_TEST_SLOW_COPY=1.25): it must fail, on at
#              least half of the gated copy metrics, in 4 rounds (the gate runs 8: the test
#              holds the weaker gate to it and keeps make test short).
#   slow-v3:   the same with every V3 sync of the candidate 20% slower
#              (SHARDSYNC_TEST_SLOW_ENGINE=v3:1.2): it must fail on engine.v3.sync_s.
set -u
mode="$1"; src="$2"; build="$3"
baseline="$src/results/perf-baseline.json"
gate=(python3 "$src/scripts/perf-check.py" --build "$build" --baseline "$baseline")
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
die() { echo "FAIL: $*"; exit 1; }

case "$mode" in
logic)
  python3 - "$baseline" "$tmp" <<'PY' || die "could not derive speed files"
import json, sys
b = json.load(open(sys.argv[1]))["metrics"]
gated = sorted(k for k, m in b.items() if m.get("gated", True))
if len(gated) < 10: sys.exit("baseline gates only %d metrics" % len(gated))
one = {k: 1.0 for k in b}
json.dump(one, open(sys.argv[2] + "/unchanged.json", "w"))
bad = dict(one)
copy = next(k for k in gated if k.startswith("copy."))
eng = "engine.v3.sync_s" if "engine.v3.sync_s" in gated else next(k for k in gated if k.startswith("engine."))
bad[copy] = 0.5
bad[eng] = b[eng]["threshold"] - 0.01
json.dump(bad, open(sys.argv[2] + "/regressed.json", "w"))
open(sys.argv[2] + "/names", "w").write("%s %s %.1f\n" % (copy, eng, (1 - bad[eng]) * 100))
loose = [k for k, m in b.items() if not m.get("gated", True)]
quiet = dict(one)
for k in loose: quiet[k] = 0.1
json.dump(quiet, open(sys.argv[2] + "/ungated-slow.json", "w"))
partial = {k: 1.0 for k in b if k != gated[0]}
json.dump(partial, open(sys.argv[2] + "/partial.json", "w"))
open(sys.argv[2] + "/first", "w").write(gated[0])
base = json.load(open(sys.argv[1]))
broken = dict(base, metrics={"copy.x.pack": {"threshold": 1.5}})
json.dump(broken, open(sys.argv[2] + "/broken-threshold.json", "w"))
json.dump(dict(base, schema=1), open(sys.argv[2] + "/old-schema.json", "w"))
json.dump(dict(base, reference_commit="main"), open(sys.argv[2] + "/no-commit.json", "w"))
PY
  read -r copy eng engoff < "$tmp/names"
  out=$(timeout 60 "${gate[@]}" --metrics "$tmp/unchanged.json" 2>&1); rc=$?
  [[ $rc -eq 0 ]] || die "every metric at 1.0: exit $rc: $out"
  grep -q "perf-check: passed" <<<"$out" || die "no pass line: $out"
  out=$(timeout 60 "${gate[@]}" --metrics "$tmp/regressed.json" --report "$tmp/report.json" 2>&1); rc=$?
  [[ $rc -eq 1 ]] || die "regressed metrics: exit $rc, expected 1: $out"
  grep -Eq "^  $copy .*REGRESSED \(50.0% slower than the reference\)" <<<"$out" || die "$copy not reported: $out"
  grep -Eq "^  $eng .*REGRESSED \($engoff% slower than the reference\)" <<<"$out" || die "$eng not reported: $out"
  grep -q "FAILED: 2 of .* gated metrics regressed" <<<"$out" || die "no summary line: $out"
  python3 -c "import json,sys; r=json.load(open('$tmp/report.json')); sys.exit(0 if sorted(r['regressed'])==sorted(['$copy','$eng']) else 1)" \
    || die "report JSON does not list the regressed metrics"
  out=$(timeout 60 "${gate[@]}" --metrics "$tmp/ungated-slow.json" 2>&1); rc=$?
  [[ $rc -eq 0 ]] || die "metrics out of the gate at 0.1: exit $rc, expected 0: $out"
  for b in broken-threshold:"metrics.copy.x.pack.threshold: expected a relative speed in (0, 1]" \
           old-schema:"schema: expected 2" no-commit:"reference_commit: expected the hex commit"; do
    out=$(timeout 60 python3 "$src/scripts/perf-check.py" --baseline "$tmp/${b%%:*}.json" --metrics "$tmp/unchanged.json" 2>&1); rc=$?
    [[ $rc -eq 2 ]] || die "${b%%:*}: exit $rc, expected 2: $out"
    grep -qF "${b%%:*}.json: ${b#*:}" <<<"$out" || die "${b%%:*}: message: $out"
  done
  out=$(timeout 60 "${gate[@]}" --metrics "$tmp/partial.json" 2>&1); rc=$?
  [[ $rc -eq 2 ]] || die "a baseline metric not measured: exit $rc, expected 2: $out"
  grep -q "metrics in the baseline were not measured: $(cat "$tmp/first")" <<<"$out" || die "missing metric not named: $out"
  out=$(timeout 60 "${gate[@]}" --candidate-env SLOW --metrics "$tmp/unchanged.json" 2>&1); rc=$?
  [[ $rc -eq 2 ]] && grep -q "candidate-env: SLOW: expected NAME=VALUE" <<<"$out" || die "bad --candidate-env: exit $rc: $out"
  out=$(timeout 60 "${gate[@]}" --reference-build "$tmp/nowhere" 2>&1); rc=$?
  [[ $rc -eq 2 ]] && grep -q "reference build: $tmp/nowhere/apps/shardsync not built" <<<"$out" || die "bad --reference-build: exit $rc: $out"
  echo "ok: pass at 1.0, two regressions named, ungated metrics ignored, bad baselines and flags refused"
  ;;
slow-copy|slow-v3)
  # The v3 case runs V3 alone (--engines v3: a third of the time per run) for 32 rounds:
  # engine process pairs vary from round to round (sigma of one round 6.7% on the quiet VM
  # of the calibration, 13% on a dev VM up for 12 hours, results/perf/gate/calibration-406f8cf/),
  # and the median of 32 leaves a 20% slower V3 (0.83) 2.2 sigmas under its threshold (0.896)
  # even at 13%, where 12 rounds left 1.3 (CI missed it once, at 6798ae5, over UCX).
  if [[ $mode == slow-copy ]]; then hook=SHARDSYNC_TEST_SLOW_COPY=1.25; only=copy; rounds=(--rounds 4); want='copy\.[a-z0-9_]+\.(pack|pack_each|unpack)'
  else hook=SHARDSYNC_TEST_SLOW_ENGINE=v3:1.2; only=engine; rounds=(--rounds 32 --engines v3); want='engine\.v3\.sync_s'; fi
  out=$(timeout 900 "${gate[@]}" --reference-build "$build" --candidate-env "$hook" --only $only "${rounds[@]}" \
        --report "$tmp/report.json" 2>&1); rc=$?
  [[ $rc -eq 1 ]] || die "$hook: exit $rc, expected 1 (regression): $out"
  n=$(grep -Ec "^  $want .*REGRESSED" <<<"$out")
  gated=$(python3 -c "import json,re; b=json.load(open('$baseline'))['metrics']; print(sum(1 for k,m in b.items() if m.get('gated',True) and re.fullmatch(r'$want',k)))")
  [[ $gated -ge 1 ]] || die "the baseline gates no metric matching $want"
  # A copy 25% slower is 0.8 of the reference, under every gated copy threshold (0.85-0.90):
  # at least half of them must be caught (noise may lift one or two over), and v3's.
  [[ $((2 * n)) -ge $gated ]] || die "$hook: only $n of $gated gated metrics matching $want regressed: $out"
  echo "ok: $hook fails the gate ($n of $gated gated metrics regressed)"
  ;;
*) die "unknown mode $mode" ;;
esac
