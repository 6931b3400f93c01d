#!/usr/bin/env bash
# gpu_script_steps.sh ROOT DIR: a GPU script (one that sources scripts/gpu/common.sh) exits 1
# when any of its steps failed or timed out, naming them in its summary, and 0 when all passed;
# a step declared an expected failure (a mutant's test) does not fail it.
set -u
root="$1"; dir="$2"
fail() { echo "FAIL: $*"; cat "$dir/stdout" 2>/dev/null; exit 1; }
run() {  # commands after sourcing common.sh; prints the script's exit status
  rm -rf "$dir" && mkdir -p "$dir"
  OUT="$dir/out" LOGS="$dir/logs" bash -c "cd '$root' && source scripts/gpu/common.sh && $1" > "$dir/stdout" 2>&1
  echo $?
}
[[ $(run 'step a 10 true; step b 10 true') == 0 ]] || fail "every step passed, the script did not exit 0"
[[ $(run 'step a 10 false; step b 10 true') == 1 ]] || fail "a failed step, then a passing one: the script did not exit 1"
grep -q "^# FAILED: a (exit 1)$" "$dir/out/summary.txt" || fail "the summary does not name the failed step"
[[ $(run 'step slow 1 sleep 5') == 1 ]] || fail "a timed-out step did not fail the script"
grep -q "slow (exit 124)" "$dir/out/summary.txt" || fail "the summary does not name the timed-out step"
[[ $(run 'step mutant 10 false; expected_failure mutant; step b 10 true') == 0 ]] || fail "an expected failure failed the script"
[[ $(run 'step mutant 10 false; expected_failure other') == 1 ]] || fail "forgiving another step hid a failure"
echo "ok: failed and timed-out steps fail a GPU script; an expected failure does not"
