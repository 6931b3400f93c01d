#!/usr/bin/env bash
# scripts/fuzz.sh SUMMARY: each libFuzzer target for FUZZ_SECONDS (make test-fuzz: 10; make
# fuzz-long: 600) on the corpus kept in build-asan/corpus (seeded from tests/fuzz/corpus), then a
# summary in SUMMARY: executions, corpus growth and every finding with its class and first frame.
# The fuzzers are built in the ASan build, build-asan (make fuzz-build).
# FUZZ_TARGETS="plan_reader ..." runs some of them only.
#
# The targets: fuzz_model_config (config.json files), fuzz_plan_file (whole plan files: header
# and checksum first) and fuzz_plan_reader (the HDF5 part of a plan file, resealed after each
# mutation, so every mutation reaches the HDF5 reading code below both checksums).
#
# The fuzzers run in fork mode and go on past a finding (-ignore_crashes/-ignore_ooms/
# -ignore_timeouts); each finding is then run again alone and classed by its first frame that
# is neither the sanitizer and fuzzer runtime nor libc:
#   ours     a frame of shardsync (or none outside the runtime): the run fails;
#   libhdf5  a frame inside libhdf5 itself, which trusts the file it reads: reported, not fixed
#            (the plan files are checksummed, so only a deliberately resealed file gets there);
#   unreproduced  the input runs clean alone (a finding that depended on the state the fuzzing
#            process had built up, as libhdf5's use-after-free in its attribute iteration can):
#            reported with its file kept, not failing.
# Exit status 1 when a fuzzer could not run or a finding is ours.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: $0 SUMMARY}"
secs="${FUZZ_SECONDS:-20}"
b=build-asan
for t in model_config plan_file plan_reader; do
  [[ -x $b/tests/fuzz/fuzz_$t ]] || { echo "$0: build the fuzzers first (make fuzz-build): no $b/tests/fuzz/fuzz_$t" >&2; exit 1; }
done
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo '?')
echo "# fuzz: $(date -u +%Y-%m-%dT%H:%MZ), commit $commit, $secs s per target, $(nproc) cores" > "$out"
export ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=print_stacktrace=1
rc=0
for t in model_config:config plan_file:plan plan_reader:plan-body; do
  name=${t%%:*} corpus=${t##*:}
  [[ " ${FUZZ_TARGETS:-model_config plan_file plan_reader} " == *" $name "* ]] || continue
  mkdir -p "$b/corpus/$corpus"
  finds="$b/findings/$name"
  rm -rf "$finds" && mkdir -p "$finds"
  before=$(ls "$b/corpus/$corpus" | wc -l)
  log="$b/fuzz-$name.log"
  ./$b/tests/fuzz/fuzz_$name -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 -timeout=10 \
    -rss_limit_mb=2048 -max_total_time="$secs" -artifact_prefix="$finds/" \
    "$b/corpus/$corpus" "tests/fuzz/corpus/$corpus" > "$log" 2>&1
  frc=$?
  after=$(ls "$b/corpus/$corpus" | wc -l)
  runs=$(grep -oE "^#[0-9]+" "$log" | tail -1 | tr -d '#')
  cov=$(grep -oE "cov: [0-9]+ ft: [0-9]+" "$log" | tail -1)
  n=$(ls "$finds" | wc -l)
  # Fork mode exits 1 when it ignored a finding; it ran when it said how long it fuzzed.
  grep -q "INFO: fuzzed for\|INFO: exiting: 0" "$log" || { echo "$0: fuzz_$name did not run (exit $frc); see $log" >&2; rc=1; }
  echo "fuzz_$name: executions ${runs:-?}, corpus $before -> $after files, ${cov:-cov ?}, findings $n" >> "$out"
  for f in "$finds"/*; do
    [[ -e "$f" ]] || continue
    trace=$(timeout 60 ./$b/tests/fuzz/fuzz_$name "$f" 2>&1)
    what=$(echo "$trace" | grep -m1 -oE "ERROR: [A-Za-z]+: [a-z-]+|runtime error: .{0,60}|ERROR: libFuzzer: [a-z-]+" || echo "?")
    # The first frame outside the runtime: "#N 0x... in FUNCTION FILE" or "#N 0x...  (MODULE+0x..)".
    frame=$(echo "$trace" | grep -E "^ +#[0-9]+ 0x" |
            grep -vE " in (__sanitizer|__asan|__ubsan|__interceptor|__libc|__GI_|__memcpy|__memmove|__memset|__strlen|malloc|calloc|realloc|free|operator new|operator delete|raise|abort|fuzzer::)| in (__|_?_?mem|str)[a-z_]*[0-9a-z_]* .*sysdeps|libFuzzer|/libc\.so|/include/c\+\+/" |
            head -1 | sed -E 's/^ +#[0-9]+ 0x[0-9a-f]+ +//; s/ \(BuildId: [0-9a-f]+\)//')
    if [[ "$frame" == *libhdf5* ]]; then class=libhdf5
    elif [[ -z "$frame" && "$what" == "?" ]]; then class=unreproduced
    else class=ours; rc=1; fi
    echo "  $class: $(basename "$f"): $what; first frame: ${frame:-none}" >> "$out"
  done
done
cat "$out"
exit $rc
