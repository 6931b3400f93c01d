#!/usr/bin/env bash
# slurm_job.sh SHARDSYNC DIR: the project's own sbatch script, submitted for real to a
# single-node Slurm started here (scripts/slurm/local-cluster.sh), with the bundled tiny MoE
# on 6 ranks in host memory: `sbatch --wait` must succeed and the job's result JSON hold every
# row of the engine table, each synced and verified (0 wrong). Skips (77) with the reason
# where Slurm is not installed (make deps-slurm) or cannot start.
set -u
ss="$1"; dir="$2"
root="$(cd "$(dirname "$0")/../.." && pwd)"
rm -rf "$dir" && mkdir -p "$dir"
env_line=$("$root/scripts/slurm/local-cluster.sh" start "$dir/cluster" 2> "$dir/start.err")
rc=$?
if [[ $rc != 0 ]]; then
  echo "SKIP: $(cat "$dir/start.err")"
  "$root/scripts/slurm/local-cluster.sh" stop "$dir/cluster"
  exit 77
fi
trap '"$root/scripts/slurm/local-cluster.sh" stop "$dir/cluster"' EXIT
eval "$env_line"
fail() { echo "FAIL: $*"; tail -30 "$dir/job.out" 2>/dev/null; exit 1; }
cd "$dir"
timeout 240 sbatch --wait --nodes=1 --ntasks=6 --overcommit -o "$dir/job.out" \
  --export=ALL,LAYOUT=tiny-moe-local,MEMORY=host,SYNCS=2,MEASURE_LINK=2,UCX_TLS=all,RESULTS="$dir/results",SHARDSYNC_BIN="$ss",BUFFERS="--send-buffer 8M --recv-buffer 4M --chunk 1M --bucket 4M",OMPI_ALLOW_RUN_AS_ROOT=1,OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
  "$root/scripts/slurm/shardsync.sbatch" > "$dir/sbatch.txt" 2>&1
rc=$?
[[ $rc == 0 ]] || fail "sbatch --wait exited $rc: $(cat "$dir/sbatch.txt")"
grep -q "^Submitted batch job" "$dir/sbatch.txt" || fail "no job submitted: $(cat "$dir/sbatch.txt")"
[[ -s "$dir/results/bench.json" ]] || fail "the job wrote no results/bench.json"
python3 - "$dir/results/bench.json" $("$ss" engines --names) <<'PY' || fail "the job's result"
import json, sys
d = json.load(open(sys.argv[1]))
got = {e["engine"]: e for e in d["engines"]}
for name in sys.argv[2:]:
    e = got.get(name)
    assert e is not None, f"engine {name} missing from the job's result"
    assert e["timed_syncs"] == 2, f"{name}: {e['timed_syncs']} timed syncs, expected 2"
    assert e["wrong"] == 0, f"{name}: {e['wrong']} wrong elements"
    assert e["bytes_moved"] > 0, f"{name}: no bytes moved"
print("job result: " + ", ".join(f"{n} {got[n]['time_s']['avg']:.4f} s" for n in sys.argv[2:]))
PY
echo "ok: sbatch --wait ran scripts/slurm/shardsync.sbatch on a local Slurm; every engine verified"
