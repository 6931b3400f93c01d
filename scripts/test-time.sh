#!/usr/bin/env bash
# scripts/test-time.sh [OUT_DIR]: what `make test` (and CI's `make perf-check` after it) cost,
# step by step, on this machine. Run it in a fresh clone (nothing built yet) to measure what CI
# pays: it runs .ci/run's steps one make target at a time, each timed, stops at the first that
# fails, and writes OUT_DIR (default results/test-time/<date>) /summary.txt and /times.json with
# the commit, the machine's cores and memory, and each step's seconds and exit status.
# PERF_CHECK=0 leaves perf-check out (make test's steps only: the gate's benchmarks take the
# machine for half an hour).
set -u
cd "$(dirname "$0")/.."
out="${1:-results/test-time/$(date -u +%Y-%m-%d)}"
mkdir -p "$out"
sha=$(git rev-parse --short=12 HEAD)
git diff --quiet HEAD -- || sha="$sha-dirty"
sum="$out/summary.txt"
{
  echo "# make test, step by step, at $sha on $(hostname): $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)"
  echo "# started $(date -u +%Y-%m-%dT%H:%M:%SZ); a fresh clone: $( [[ -d build ]] && echo no || echo yes )"
} | tee "$sum"
steps=("deps-slurm" "build" "test-main" "test-asan" "test-tsan" "test-fuzz")
[[ "${PERF_CHECK:-1}" == 0 ]] || steps+=("perf-check")
json="["
total=0
status=0
for s in "${steps[@]}"; do
  t0=$SECONDS
  if [[ $s == deps-slurm ]]; then timeout 300 make deps-slurm > "$out/$s.log" 2>&1; rc=$?; rc=0  # optional, as in .ci/run
  else make "$s" > "$out/$s.log" 2>&1; rc=$?; fi
  dt=$((SECONDS - t0))
  total=$((total + dt))
  printf "%-11s %5d s  exit %d\n" "$s" "$dt" "$rc" | tee -a "$sum"
  json+="{\"step\": \"$s\", \"seconds\": $dt, \"exit\": $rc},"
  if [[ $rc -ne 0 ]]; then status=$rc; tail -30 "$out/$s.log"; break; fi
done
test_s=0
for s in build test-main test-asan test-tsan test-fuzz; do
  v=$(grep -E "^$s " "$sum" | awk '{print $2}'); test_s=$((test_s + ${v:-0}))
done
echo "make test (build through test-fuzz): $test_s s; with perf-check and deps-slurm: $total s" | tee -a "$sum"
echo "${json%,}]" | python3 -c "import json,sys; json.dump({'git_sha': '$sha', 'cores': $(nproc), 'steps': json.load(sys.stdin), 'make_test_s': $test_s, 'total_s': $total}, open('$out/times.json', 'w'), indent=1)"
# The main suite's slowest tests (wall seconds each; two run at once on two cores).
if [[ -f "$out/test-main.log" ]]; then
  echo "# test-main's 15 slowest tests:" | tee -a "$sum"
  grep -E "Test +#[0-9]+: " "$out/test-main.log" | sed -E 's/.*Test +#[0-9]+: ([^ ]+) .* ([0-9.]+) sec$/\2 \1/' |
    sort -rn | head -15 | awk '{printf "  %7.1f s  %s\n", $1, $2}' | tee -a "$sum"
fi
exit $status
