#!/usr/bin/env bash
# Issue 39's command under CPU load: a busy rank must not be called dead.
#
#   scripts/liveness-under-load.sh [SHARDSYNC] [OUT_DIR] [RUNS]
#
# Two busy loops hold the 2-core machine while `shardsync bench` syncs Qwen3-0.6B from one
# trainer rank to TP2 with an FP8 target (the receivers quantize and verify for seconds on a
# CPU), RUNS times (default 3). Each run's log and JSON go to OUT_DIR (default
# results/liveness/under-load), with summary.txt: exit status, syncs, wrong elements, and any
# replica taken down. Exit 0 when every run passed with every sync verified and none down.
set -u
ss=${1:-build/apps/shardsync}
out=${2:-results/liveness/under-load}
runs=${3:-3}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cmd=(mpirun --oversubscribe -np 3 "$ss" bench --model qwen3-0.6b --trainer tp1 --inference tp2 --engine v3
     --syncs 2 --warmup 1 --quant fp8-block128)

loops=()
for _ in 1 2; do
  (while :; do :; done) &
  loops+=($!)
done
trap 'kill "${loops[@]}" 2>/dev/null' EXIT

summary="$out/summary.txt"
{
  echo "# issue 39's command under load: two busy loops on $(nproc) cores ($(hostname)), $(date -u +%FT%TZ)"
  echo "# command: ${cmd[*]} --json RUN.json"
  echo "# run  exit  syncs  wrong  down  load1"
} >"$summary"
failed=0
for k in $(seq 1 "$runs"); do
  timeout 900 "${cmd[@]}" --json "$out/run-$k.json" </dev/null >"$out/run-$k.log" 2>&1
  rc=$?
  syncs=$(grep -cE "^# v3 sync [0-9]+/3" "$out/run-$k.log")
  wrong=$(sed -nE 's/^# v3 sync [0-9]+\/3.*: [0-9.]+ s, ([0-9]+) wrong.*/\1/p' "$out/run-$k.log" | paste -sd+ | bc)
  down=$(grep -cE "^# v3 sync .*(down|skipped)" "$out/run-$k.log")
  load=$(cut -d' ' -f1 /proc/loadavg)
  printf "  %3d  %4d  %5d  %5s  %4d  %5s\n" "$k" "$rc" "$syncs" "${wrong:-?}" "$down" "$load" >>"$summary"
  [[ $rc -eq 0 && $syncs -eq 3 && "${wrong:-1}" == 0 && $down -eq 0 ]] || failed=$((failed + 1))
done
sha=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("git_sha", "?"))' "$out/run-1.json" 2>/dev/null)
echo "# binary built from commit ${sha:-unknown} (the JSON's git_sha); passed $((runs - failed)) of $runs" >>"$summary"
cat "$summary"
[[ $failed -eq 0 ]]
