#!/usr/bin/env bash
# bench_check.sh NP SHARDSYNC [bench args...]
# Runs `shardsync bench` under mpirun on NP local ranks (bounded by a timeout) and checks
# that every engine row is present, ran the requested syncs, and verified every byte
# (#wrong = 0). The engines expected are every row of the engine table (`shardsync engines
# --names`, what bench runs by default), so a new row is tested here without a new test;
# EXPECT_ENGINES overrides. EXPECT_ONE_PASS=some: every pull row read some bytes from the
# trainers' weights in one pass (the 1pass column > 0); none: no row did. EXPECT_TRANSPORT:
# a regex the run's transport line must match (that the transport asked for is the one used).
# EXPECT_QUANTIZE=1: an FP8 target: a quantize column with a value in every row, > 0 in the
# rows that quantize on the main lane (layerwise rows on the background lane time the launch).
# EXPECT_WIRE_FP8=1: FP8 on the wire at an inference layout where each rank holds the whole
# model (TP1, as the broadcast sends it): every pull row moved at most 3/4 of the broadcast
# row's bytes (bf16 would move the same).
# EXPECT_DELTA=LO:HI: --delta: every pull row moved between LO% and HI% of what a full sync
# moves (its of_full column; the broadcast row has none).
set -u
np="$1"; ss="$2"; shift 2
engines="${EXPECT_ENGINES:-$("$ss" engines --names)}"
[[ -n "$engines" ]] || { echo "FAIL: $ss engines --names listed nothing"; exit 1; }
out=$(timeout "${RUN_TIMEOUT:-240}" mpirun --oversubscribe -np "$np" "$ss" bench "$@" 2>&1)
rc=$?
fail() { echo "FAIL: $1"; echo "$out" | tail -40; exit 1; }
[[ $rc -eq 124 ]] && fail "timed out (hang)"
[[ $rc -ne 0 ]] && fail "exit status $rc"
# Columns by their header name (the header line starts with "#", the rows do not).
col() { awk -v name="$1" '$1 == "#" && $2 == "engine" { for (i = 2; i <= NF; ++i) if ($i == name) { print i - 1; exit } }' <<<"$out"; }
if [[ -n "${EXPECT_TRANSPORT:-}" ]]; then
  grep -qE "^# model .*, transport $EXPECT_TRANSPORT" <<<"$out" || fail "the transport line does not match '$EXPECT_TRANSPORT'"
fi
quantized=0
moved_col=$(col moved)
bcast_moved=$(awk -v c="$moved_col" '$1 == "broadcast" {print $c}' <<<"$out")
wrong_col=$(col "#wrong"); pass_col=$(col 1pass); max_col=$(col max); transfer_col=$(col transfer)
[[ -n "$wrong_col" && -n "$pass_col" ]] || fail "no #wrong or 1pass column in the table header"
for e in $engines; do
  row=$(awk -v e="$e" '$1 == e' <<<"$out")
  [[ -n "$row" ]] || fail "no result row for engine $e"
  syncs=$(awk '{print $2}' <<<"$row")
  wrong=$(awk -v c="$wrong_col" '{print $c}' <<<"$row")
  one_pass=$(awk -v c="$pass_col" '{print $c}' <<<"$row")
  [[ "$syncs" -ge 2 ]] || fail "engine $e ran $syncs timed syncs"
  [[ "$wrong" == 0 ]] || fail "engine $e: $wrong wrong elements"
  # Each time column is a part of the sync's time: reads in flight together count once.
  awk -v t="$(awk -v c="$transfer_col" '{print $c}' <<<"$row")" -v m="$(awk -v c="$max_col" '{print $c}' <<<"$row")" \
    'BEGIN { exit !(t <= m + 1e-6) }' || fail "engine $e: transfer exceeds the slowest sync's time"
  if [[ -n "${EXPECT_QUANTIZE:-}" ]]; then
    q_col=$(col quantize)
    [[ -n "$q_col" ]] || fail "no quantize column in the table header (an FP8 target)"
    q=$(awk -v c="$q_col" '{print $c}' <<<"$row")
    [[ "$q" =~ ^[0-9]+\.[0-9]+$ ]] || fail "engine $e: quantize column '$q'"
    awk -v x="$q" 'BEGIN { exit !(x + 0 > 0) }' && quantized=$((quantized + 1))
  fi
  if [[ -n "${EXPECT_WIRE_FP8:-}" && "$e" != broadcast ]]; then
    moved=$(awk -v c="$moved_col" '{print $c}' <<<"$row")
    awk -v m="$moved" -v b="${bcast_moved:-0}" 'BEGIN { exit !(b > 0 && m <= 0.75 * b) }' ||
      fail "engine $e moved $moved MB with FP8 on the wire, the broadcast (bf16) ${bcast_moved:-?} MB: expected at most 3/4"
  fi
  if [[ -n "${EXPECT_DELTA:-}" ]]; then
    of_full_col=$(col of_full)
    [[ -n "$of_full_col" ]] || fail "no of_full column in the table header (--delta)"
    pct=$(awk -v c="$of_full_col" '{print $c}' <<<"$row")
    if [[ "$e" == broadcast ]]; then
      [[ "$pct" == - ]] || fail "the broadcast row has of_full $pct, expected - (it sends everything)"
    else
      awk -v x="$pct" -v r="$EXPECT_DELTA" 'BEGIN { split(r, b, ":"); exit !(x ~ /^[0-9.]+$/ && x + 0 >= b[1] && x + 0 <= b[2]) }' ||
        fail "engine $e moved ${pct}% of a full sync, expected ${EXPECT_DELTA/:/ to }%"
    fi
  fi
  case "${EXPECT_ONE_PASS:-}:$e" in
    some:broadcast | :*) ;;
    some:*) awk -v x="$one_pass" 'BEGIN { exit !(x + 0 > 0) }' || fail "engine $e read nothing in one pass (1pass $one_pass)" ;;
    none:*) [[ "$one_pass" == 0.0 || "$one_pass" == - ]] || fail "engine $e read $one_pass% in one pass, expected none" ;;
  esac
done
[[ -z "${EXPECT_QUANTIZE:-}" || ${quantized:-0} -gt 0 ]] || fail "no engine spent time quantizing (an FP8 target)"
echo "ok: $(for e in $engines; do awk -v e="$e" '$1 == e {printf "%s %ss; ", $1, $3}' <<<"$out"; done)"
