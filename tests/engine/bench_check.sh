#!/usr/bin/env bash
# bench_check.sh NP SHARDSYNC [bench args...]
# Runs `shardsync bench` under mpirun on NP local ranks (bounded by a timeout) and checks
# that every engine row is present, ran the requested syncs, and verified every byte
# (#wrong = 0). The engines expected are every row of the engine table (`shardsync engines
# --names`, what bench runs by default), so a new row is tested here without a new test;
# EXPECT_ENGINES overrides.
set -u
np="$1"; ss="$2"; shift 2
engines="${EXPECT_ENGINES:-$("$ss" engines --names)}"
[[ -n "$engines" ]] || { echo "FAIL: $ss engines --names listed nothing"; exit 1; }
out=$(timeout "${RUN_TIMEOUT:-240}" mpirun --oversubscribe -np "$np" "$ss" bench "$@" 2>&1)
rc=$?
fail() { echo "FAIL: $1"; echo "$out" | tail -40; exit 1; }
[[ $rc -eq 124 ]] && fail "timed out (hang)"
[[ $rc -ne 0 ]] && fail "exit status $rc"
for e in $engines; do
  row=$(awk -v e="$e" '$1 == e' <<<"$out")
  [[ -n "$row" ]] || fail "no result row for engine $e"
  syncs=$(awk '{print $2}' <<<"$row")
  wrong=$(awk '{print $16}' <<<"$row")
  [[ "$syncs" -ge 2 ]] || fail "engine $e ran $syncs timed syncs"
  [[ "$wrong" == 0 ]] || fail "engine $e: $wrong wrong elements"
done
echo "ok: $(for e in $engines; do awk -v e="$e" '$1 == e {printf "%s %ss; ", $1, $3}' <<<"$out"; done)"
