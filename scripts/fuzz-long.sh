#!/usr/bin/env bash
# make fuzz-long: each libFuzzer target for FUZZ_SECONDS (default 600) on the corpus kept in
# build-fuzz/corpus (seeded from tests/fuzz/corpus), then a summary of executions, corpus
# growth and findings (crash-*/leak-*/timeout-* files libFuzzer leaves) in build-fuzz/fuzz-long.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
secs="${FUZZ_SECONDS:-600}"
out=build-fuzz/fuzz-long.txt
[[ -x build-fuzz/tests/fuzz/fuzz_plan_file ]] || { echo "$0: build the fuzzers first (make fuzz-build)" >&2; exit 1; }
{
  echo "# make fuzz-long: $(date -u +%Y-%m-%dT%H:%MZ), commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo '?'), $secs s per target, $(nproc) cores"
} > "$out"
rc=0
for t in model_config:config plan_file:plan; do
  name=${t%%:*} corpus=${t##*:}
  before=$(ls build-fuzz/corpus/$corpus | wc -l)
  log=build-fuzz/fuzz-long-$name.log
  ( cd build-fuzz && ASAN_OPTIONS=detect_leaks=0 ./tests/fuzz/fuzz_$name -max_total_time="$secs" -print_final_stats=1 \
      corpus/$corpus ../tests/fuzz/corpus/$corpus ) > "$log" 2>&1
  frc=$?
  after=$(ls build-fuzz/corpus/$corpus | wc -l)
  execs=$(grep -oE "stat::number_of_executed_units: *[0-9]+" "$log" | grep -oE "[0-9]+$")
  added=$(grep -oE "stat::new_units_added: *[0-9]+" "$log" | grep -oE "[0-9]+$")
  cov=$(grep -oE "DONE +cov: [0-9]+ ft: [0-9]+" "$log" | tail -1 | sed -E 's/DONE +//')
  findings=$(ls build-fuzz/crash-* build-fuzz/leak-* build-fuzz/timeout-* 2>/dev/null | wc -l)
  echo "fuzz_$name: exit $frc, executions ${execs:-?}, new units ${added:-?}, corpus $before -> $after files, ${cov:-cov ?}, findings $findings" >> "$out"
  [[ $frc == 0 ]] || rc=1
done
cat "$out"
exit $rc
