#!/usr/bin/env bash
# failure_check.sh MODE SHARDSYNC
# Replica failure and stragglers on the bundled tiny MoE (6 ranks: 2 trainers, 2 inference
# replicas of 2 ranks each; replica 1 is world ranks 4 and 5).
#   selfkill  world rank 5 SIGKILLs itself mid-sync 2 (--fail-at)
#   sigkill   this script SIGKILLs world rank 5 from outside while syncs run
#   straggler world rank 5 sleeps after every chunk; only replica 1 may be slower
#   trainer   this script SIGKILLs trainer rank 1: not survivable, so each of the 5 survivors
#             prints the one line naming rank 1 and exits within the failure timeout + 10 s
#   rejoin    world rank 5 dies at sync 2; a replacement (shardsync join) takes its place
#             through the rendezvous directory, and replica 1 comes back up verified
#   busy-process, busy-verify
#             world rank 5 sleeps 2.5 s (failure timeout 1 s) in its process step or before its
#             verification at sync 1 of every engine row: busy, not dead (its heartbeats go
#             on); every sync of every engine must pass verified with no replica down, with
#             failure tolerance on (busy-verify) and off (busy-process: no MCA settings)
#   stall     world rank 5 sleeps 6 s before its verification at sync 1 (--stall-timeout 2): rank 0,
#             waiting for its report, ends on its stall watchdog with the one line naming the
#             phase and rank 5 (alive: its heartbeats go on)
#   lost-off  failure tolerance off (--failure-tolerance off): this script SIGKILLs world rank 5;
#             each of the 5 survivors prints the one line naming rank 5 and exits non-zero
#             within the failure timeout + 10 s
# Passes when the job exits 0 with every sync of the surviving replica verified, replica 1
# reported down (kill modes) or slower than replica 0 by a wide ratio (straggler).
set -u
mode="$1"; ss="$2"
limit=${FAILURE_CHECK_TIMEOUT:-120}
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
log="$dir/log"
# Open MPI must not tear the job down when one rank dies (README, failure model).
mca=(--mca orte_enable_recovery 1 --mca orte_abort_on_non_zero_status 0 --mca orte_allowed_exit_without_sync 1)
# FAILURE_CHECK_MEMORY=cuda: the same failures with weights in GPU memory, over UCX (the
# replacement always uses UCX).
memory=(--memory "${FAILURE_CHECK_MEMORY:-host}")
extra=("${memory[@]}")
[[ "${FAILURE_CHECK_MEMORY:-host}" == cuda ]] && extra+=(--transport ucx)
# FAILURE_CHECK_ARGS: more options for the job and the replacement alike (as --delta).
read -r -a more <<<"${FAILURE_CHECK_ARGS:-}"
memory+=("${more[@]}")
extra+=("${more[@]}")
common=(sync --layout tiny-moe-local -e v3 --warmup 1 --failure-timeout 2 --json "$dir/out.json" "${extra[@]}")

fail() { echo "FAIL ($mode): $*"; tail -40 "$log"; exit 1; }

# Each rank's exit status, written to $dir/status-RANK by a wrapper around the binary (mpirun
# itself returns 0 under the recovery settings whatever its ranks' status).
recorded=(bash -c 'dir="$1"; shift; "$@"; echo $? >"$dir/status-$OMPI_COMM_WORLD_RANK"' _ "$dir")
# The survivors' statuses, "RANK:STATUS ..." in rank order.
statuses() { for f in "$dir"/status-*; do echo "${f##*-}:$(cat "$f")"; done | sort -n | tr '\n' ' '; }
# The pid of world rank $1 of this job (the binary, not its wrapper).
pid_of_rank() {
  for pid in $(pgrep -f "^$ss sync"); do
    tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx "OMPI_COMM_WORLD_RANK=$1" && echo "$pid"
  done | head -1
}

case "$mode" in
  selfkill)
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "$ss" "${common[@]}" --syncs 4 --fail-at sync=2,rank=5 \
      </dev/null >"$log" 2>&1
    rc=$?
    ;;
  sigkill)
    # The victim is slowed so that a sync lasts long enough to be caught in the middle.
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "$ss" "${common[@]}" --syncs 30 \
      --slow-rank 5 --slow-ms 40 </dev/null >"$log" 2>&1 &
    job=$!
    victim=""
    for _ in $(seq 1 600); do
      if grep -q "v3 sync 3/" "$log" 2>/dev/null; then
        for pid in $(pgrep -f "$(basename "$ss") sync"); do
          tr '\0' '\n' 2>/dev/null <"/proc/$pid/environ" | grep -qx 'OMPI_COMM_WORLD_RANK=5' && victim=$pid
        done
        break
      fi
      sleep 0.1
    done
    [[ -n "$victim" ]] || { kill -- -"$job" 2>/dev/null; fail "did not find world rank 5 running"; }
    kill -9 "$victim"
    echo "killed world rank 5 (pid $victim)"
    wait "$job"
    rc=$?
    ;;
  straggler)
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "$ss" "${common[@]}" --syncs 4 \
      --slow-rank 5 --slow-ms 30 </dev/null >"$log" 2>&1
    rc=$?
    ;;
  trainer)
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "${recorded[@]}" "$ss" "${common[@]}" --syncs 200 \
      --slow-rank 5 --slow-ms 20 </dev/null >"$log" 2>&1 &
    job=$!
    for _ in $(seq 1 600); do grep -q "v3 sync 3/" "$log" && break; sleep 0.1; done
    victim=$(pid_of_rank 1)
    [[ -n "$victim" ]] || { kill -- -"$job" 2>/dev/null; fail "did not find trainer rank 1 running"; }
    kill -9 "$victim"
    wait "$job"
    rc=$?
    [[ $rc -ne 124 ]] || fail "timed out (hang) after trainer rank 1 died"
    # Each survivor sees rank 1's heartbeats end (its port closed, or silence for the failure
    # timeout) and prints the one line, or, where its transport reports the dead trainer first,
    # an error naming rank 1 (UCX 1.22 fails a get in flight to a dead peer at once).
    # The reason is the trainer's where failures are tolerated (UCX), else tolerance off (a build
    # without UCX, whose transport is mpi).
    line='^shardsync: rank ([02-5]) \((trainer|inference)[^)]*\): rank 1 \(trainer\) lost: (its process is gone|no heartbeat for [0-9.]+ s)[^;]*; (a trainer rank cannot be lost \(its shards have no other copy\)|failure tolerance is off \(--failure-tolerance\)): exiting$'
    ranks=$( { sed -nE "s/$line/\1/p" "$log"
               sed -n 's/^shardsync: error on rank \([0-9][0-9]*\): .*rank 1 failed.*/\1/p' "$log"; } | sort -u | tr '\n' ' ')
    [[ "$ranks" == "0 2 3 4 5 " ]] || fail "expected the line (or an error naming rank 1) on each of ranks 0, 2-5, saw: $ranks"
    [[ "$(statuses)" =~ ^0:[1-9][0-9]*\ 1:137\ 2:[1-9][0-9]*\ 3:[1-9][0-9]*\ 4:[1-9][0-9]*\ 5:[1-9][0-9]*\ $ ]] ||
      fail "expected rank 1 killed and every other rank to exit non-zero, saw: $(statuses)"
    echo "ok: trainer rank 1 killed; ranks $ranks each exited naming it ($(grep -cE "$line" "$log") with the one line), statuses $(statuses)"
    exit 0
    ;;
  rejoin)
    # Replica 0 is slowed so that the run outlasts detection and the replacement's start.
    mkdir -p "$dir/rdv"
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "$ss" "${common[@]}" --syncs 24 --fail-at sync=2,rank=5 \
      --slow-rank 2 --slow-ms 25 --rendezvous "$dir/rdv" </dev/null >"$log" 2>&1 &
    job=$!
    for _ in $(seq 1 600); do grep -q "replicas down: 1" "$log" && break; sleep 0.1; done
    grep -q "replicas down: 1" "$log" || { wait "$job"; fail "replica 1 never went down"; }
    # A replacement started with other buffer options is refused, naming the contact file.
    bad=$(timeout 60 "$ss" join --layout tiny-moe-local --rank 5 --rendezvous "$dir/rdv" --chunk 1M "${memory[@]}" 2>&1)
    [[ $? -ne 0 ]] && grep -q "trainer-0.contact: fingerprint: the job runs .*chunk 4194304.*this replacement was started for .*chunk 1048576" <<<"$bad" ||
      { wait "$job"; fail "a mismatched replacement was not refused clearly: $bad"; }
    timeout 60 "$ss" join --layout tiny-moe-local --rank 5 --rendezvous "$dir/rdv" --json "$dir/join.json" "${memory[@]}" \
      >"$dir/join.log" 2>&1
    jrc=$?
    wait "$job"
    rc=$?
    [[ $jrc -eq 0 ]] || { cat "$dir/join.log"; fail "replacement exit $jrc"; }
    grep -qE "rank 5 rejoined at weights version [0-9]+ and served [0-9]+ syncs; every byte verified" "$dir/join.log" ||
      { cat "$dir/join.log"; fail "replacement did not verify its syncs"; }
    ;;
  busy-process|busy-verify)
    in=${mode#busy-}
    recovery=("${mca[@]}")
    [[ $in == process ]] && recovery=()  # tolerance off: a false death would end the job
    timeout "$limit" mpirun --oversubscribe "${recovery[@]}" -np 6 "$ss" sync --layout tiny-moe-local \
      -e broadcast,v1,v2,v3,v4 --syncs 2 --warmup 1 --failure-timeout 1 --stall-at "sync=1,rank=5,in=$in,s=2.5" \
      --json "$dir/out.json" "${extra[@]}" </dev/null >"$log" 2>&1
    rc=$?
    [[ $rc -ne 124 ]] || fail "timed out (hang)"
    [[ $rc -eq 0 ]] || fail "exit $rc, expected 0: a busy rank was taken for dead"
    grep -E "^# (broadcast|v[1-4]) sync" "$log" | grep -qiE "down|lost|dead" && fail "a busy rank was taken for dead"
    for e in broadcast v1 v2 v3 v4; do
      n=$(grep -cE "^# $e sync [0-9]+/3.*: [0-9.]+ s, 0 wrong$" "$log")
      [[ $n -eq 3 ]] || fail "$e: expected 3 syncs verified with nothing down, saw $n"
    done
    python3 - "$dir/out.json" <<'EOF' || fail "the JSON shows a replica down, an event, or rank 5 unreported"
import json, sys
j = json.load(open(sys.argv[1]))
ok = j["replicas_down"] == [] and not j["events"] and len(j["engines"]) == 5
for e in j["engines"]:
    # the stalled sync (index 1: the first timed one): rank 5 reported, nothing wrong
    ok = ok and any(r["rank"] == 5 and r["reported"] and r["mismatches"] == 0 for r in e["syncs"][0]["ranks"])
sys.exit(0 if ok else 1)
EOF
    echo "ok: rank 5 busy 2.5 s in its $in step at sync 1 of every engine (failure timeout 1 s); every sync verified, nothing down"
    exit 0
    ;;
  stall)
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "${recorded[@]}" "$ss" "${common[@]}" --syncs 3 \
      --stall-timeout 2 --stall-at sync=1,rank=5,in=verify,s=6 </dev/null >"$log" 2>&1
    rc=$?
    [[ $rc -ne 124 ]] || fail "timed out (hang)"
    line="^shardsync: rank 0 \(trainer\): no progress for [0-9]+ s while collecting the inference ranks' reports on rank 5 \(inference, replica 1\) \(its last heartbeat 0\.[0-9] s ago\); a step that takes longer needs a longer --stall-timeout: exiting$"
    grep -qE "$line" "$log" || fail "no stall line on rank 0 naming the phase and rank 5"
    [[ "$(statuses)" == 0:4\ * ]] || fail "expected rank 0 to exit with status 4, saw: $(statuses)"
    echo "ok: rank 0 ended on its stall watchdog naming the phase and rank 5: $(grep -E "$line" "$log")"
    exit 0
    ;;
  lost-off)
    timeout "$limit" mpirun --oversubscribe "${mca[@]}" -np 6 "${recorded[@]}" "$ss" "${common[@]}" --syncs 200 \
      --failure-tolerance off --slow-rank 5 --slow-ms 20 </dev/null >"$log" 2>&1 &
    job=$!
    for _ in $(seq 1 600); do grep -q "v3 sync 3/" "$log" && break; sleep 0.1; done
    victim=$(pid_of_rank 5)
    [[ -n "$victim" ]] || { kill -- -"$job" 2>/dev/null; fail "did not find world rank 5 running"; }
    t0=$(date +%s%N)
    kill -9 "$victim"
    wait "$job"
    rc=$?
    took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    [[ $rc -ne 124 ]] || fail "timed out (hang) after rank 5 died"
    [[ "$(statuses)" == "0:5 1:5 2:5 3:5 4:5 5:137 " ]] ||
      fail "expected rank 5 killed and every survivor to exit with status 5, saw: $(statuses)"
    line='^shardsync: rank ([0-4]) \((trainer|inference)[^)]*\): rank 5 \(inference, replica 1\) lost: (its process is gone|no heartbeat for [0-9.]+ s)[^;]*; failure tolerance is off \(--failure-tolerance\): exiting$'
    ranks=$(sed -nE "s/$line/\1/p" "$log" | sort -u | tr '\n' ' ')
    [[ "$ranks" == "0 1 2 3 4 " ]] || fail "expected the one line on each of ranks 0-4, saw it on: $ranks"
    n=$(grep -cE "$line" "$log")
    [[ $n -eq 5 ]] || fail "expected exactly one line per survivor, saw $n"
    (( took_ms < 12000 )) || fail "the survivors took $took_ms ms to exit (failure timeout 2 s + 10 s)"
    echo "ok: rank 5 killed, tolerance off: ranks $ranks each printed the line and exited 5 within $took_ms ms"
    exit 0
    ;;
  *) echo "usage: $0 selfkill|sigkill|straggler|trainer|rejoin|busy-process|busy-verify|stall|lost-off SHARDSYNC"; exit 2 ;;

esac

[[ $rc -ne 124 ]] || fail "timed out (hang)"
[[ $rc -eq 0 ]] || fail "exit $rc, expected 0"
syncs=$(grep -cE "^# v3 sync [0-9]+/" "$log")
[[ $syncs -ge 5 ]] || fail "expected at least 5 syncs, saw $syncs"
grep -E "^# v3 sync [0-9]+/" "$log" | grep -vq " 0 wrong" && fail "a sync had wrong elements"
grep -qE "^  v3 +[0-9]+ .* 0 +-( |$)" "$log" || fail "no v3 summary row with 0 wrong"
[[ -s "$dir/out.json" ]] || fail "no JSON result"

if [[ " ${more[*]} " == *" --dedupe-node "* && $mode == selfkill ]]; then
  # Node-level dedupe (SHARDSYNC_FAKE_HOSTS=2: each replica's two ranks share a node): world rank 5
  # pulled some of rank 4's shared bytes; they are reported lost (not wrong) at the sync it died
  # in, and replica 0's ranks, which share only with each other, copied theirs at every sync.
  python3 - "$dir/out.json" <<'EOF' || fail "dedupe: the JSON does not show the lost bytes and replica 0's copies"
import json, sys
j = json.load(open(sys.argv[1]))
lost = [e for e in j["events"] if e["event"] == "node_bytes_lost"]
ok = len(lost) == 1 and lost[0]["rank"] == 4 and lost[0]["bytes"] > 0
for s in j["engines"][0]["syncs"]:
    for r in s["ranks"]:
        if r["rank"] in (2, 3):
            ok = ok and r["reported"] and r["node_bytes"] > 0 and r["node_lost_bytes"] == 0 and r["mismatches"] == 0
print("dedupe: lost", lost)
sys.exit(0 if ok else 1)
EOF
  grep -qE "^# v3 sync 3/5: .* 0 wrong.*, rank 4 lost [0-9]+ bytes to a dead puller in its node" "$log" ||
    fail "dedupe: no progress line naming rank 4's lost bytes"
fi

if [[ $mode == straggler ]]; then
  grep -q "replicas down" "$log" && fail "a merely slow replica was taken down"
  line=$(grep "v3 replica completion" "$log") || fail "no replica completion line"
  r0=$(sed -E 's/.* r0 ([0-9.]+).*/\1/' <<<"$line"); r1=$(sed -E 's/.* r1 ([0-9.]+).*/\1/' <<<"$line")
  # A ratio, not a timing: the slowed replica sleeps >= 30 ms per chunk, the other none.
  awk -v a="$r0" -v b="$r1" 'BEGIN { exit !(b > 4 * a) }' ||
    fail "replica 0 (${r0} s) was not spared the straggler in replica 1 (${r1} s)"
  echo "ok: replica 0 ${r0} s, slowed replica 1 ${r1} s, nothing taken down"
elif [[ $mode == rejoin ]]; then
  grep -qE "^# v3 sync [0-9]+/[0-9]+: .* 0 wrong, rank 5 replaced \(replica 1 up again\)$" "$log" ||
    fail "no progress line with the replacement"
  grep -qE "^# failures: replica 1 down at v3 sync 3; rank 5 replaced at v3 sync [0-9]+; every replica up at the end" "$log" ||
    fail "no failures line with the rejoin"
  grep -qE "^# v3 sync ${syncs}/${syncs}: .* 0 wrong$" "$log" || fail "last sync not verified with every replica up"
  python3 - "$dir/out.json" "$dir/join.json" <<'EOF' || fail "JSON lacks the events or the replacement's syncs"
import json, sys
job, rep = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
kinds = [e["event"] for e in job["events"]]
ok = kinds == ["replica_down", "rejoin"] and job["replicas_down"] == []
r = rep["replacement"]
ok = ok and r["rank"] == 5 and r["mismatches"] == 0 and len(r["syncs"]) >= 1
if job["config"].get("delta"):
    # The replacement holds nothing: its first sync is an anchor (every chunk whole), and the
    # syncs after it are deltas again. (Its replica's other rank missed versions while the
    # replica was down: without that anchor it refuses the next delta and the job fails.)
    s = r["syncs"]
    ok = ok and s[0]["delta_chunks"] > 0 and s[0]["delta_whole_chunks"] == s[0]["delta_chunks"]
    ok = ok and len(s) >= 2 and all(x["delta_whole_chunks"] < x["delta_chunks"] for x in s[1:])
    print("replacement's syncs (whole/chunks):", [(x["delta_whole_chunks"], x["delta_chunks"]) for x in s])
sys.exit(0 if ok else 1)
EOF
  echo "ok: replica 1 down at sync 3, rank 5 replaced and verified, every replica up through sync $syncs/$syncs"
else
  grep -qE "^# failures: replica 1 down at v3 sync [0-9]+; (rank 4 lost [0-9]+ bytes of its node's copies at v3 sync [0-9]+; )?replicas 1 down at the end" "$log" || fail "replica 1 not reported down"
  grep -qE "^# v3 sync ${syncs}/${syncs}: .* 0 wrong, replicas down: 1$" "$log" || fail "last sync not verified with replica 1 down"
  python3 - "$dir/out.json" <<'EOF' || fail "JSON lacks replicas_down [1]"
import json, sys
sys.exit(0 if json.load(open(sys.argv[1])).get("replicas_down") == [1] else 1)
EOF
  echo "ok: replica 1 down, replica 0 verified through sync $syncs/$syncs"
fi
