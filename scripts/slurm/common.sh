# Shared by the sbatch scripts: parse --dry-run, find the binary, print the rank map with
# node placement, record plans offline, then launch (or print the launch line).
# Expects: LAYOUT, NODES, TASKS_PER_NODE, SYNCS, NAME, and ENGINES (a comma list; empty:
# every row of the engine table, `shardsync engines --names`). Inside a job the allocation
# (SLURM_JOB_NUM_NODES, SLURM_NTASKS) gives NODES and TASKS_PER_NODE. Also from the
# environment: MEMORY (cuda), TRANSPORT (auto), BUFFERS (the buffer flags), MEASURE_LINK (5),
# MPIRUN_ARGS (extra mpirun flags), RESULTS (where plans and results go), SHARDSYNC_BIN.
set -euo pipefail
if [[ -n "${SLURM_JOB_NUM_NODES:-}" && -n "${SLURM_NTASKS:-}" ]]; then
  NODES=$SLURM_JOB_NUM_NODES
  TASKS_PER_NODE=$((SLURM_NTASKS / SLURM_JOB_NUM_NODES))
fi
MEMORY="${MEMORY:-cuda}"
TRANSPORT="${TRANSPORT:-auto}"
BUFFERS="${BUFFERS:---send-buffer 2G --recv-buffer 2G --chunk 256M --bucket 2G}"
MEASURE_LINK="${MEASURE_LINK:-5}"
read -r -a extra_mpirun <<<"${MPIRUN_ARGS:-}"
read -r -a buffer_flags <<<"$BUFFERS"
DRY_RUN=0
for a in "$@"; do [[ "$a" == "--dry-run" ]] && DRY_RUN=1; done
REPO="${SHARDSYNC_REPO:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
SS="${SHARDSYNC_BIN:-$REPO/build/apps/shardsync}"
RESULTS="${RESULTS:-$REPO/results/slurm/$NAME-${SLURM_JOB_ID:-dryrun}}"
WORLD=$((NODES * TASKS_PER_NODE))
[[ -x "$SS" ]] || { echo "error: $SS not found or not executable (build first: make, or set SHARDSYNC_BIN)" >&2; exit 2; }
[[ -n "${ENGINES:-}" ]] || ENGINES=$("$SS" engines --names | paste -sd, -)

# One rank per GPU, ranks filled node by node: trainer ranks 0..T-1 take the first nodes,
# inference ranks the following ones (the layout's trainer world is a multiple of 8 here).
echo "# $NAME: $NODES nodes x $TASKS_PER_NODE ranks = $WORLD ranks, layout $LAYOUT"
"$SS" layout show --layout "$LAYOUT" --world-size "$WORLD" |
  awk -v tpn="$TASKS_PER_NODE" '
    /^# rank/ { print $0 "  node"; next }
    /^#/ { print; next }
    { printf "%s %5d\n", $0, int($1 / tpn) }'

# Network environment for UCX and NCCL over InfiniBand (override for your cluster).
export UCX_TLS="${UCX_TLS:-rc,sm,self,cuda_copy,cuda_ipc,gdr_copy}"
export UCX_NET_DEVICES="${UCX_NET_DEVICES:-all}"
export NCCL_IB_DISABLE="${NCCL_IB_DISABLE:-0}"
export NCCL_NVLS_ENABLE=0
export SHARDSYNC_UCX_PEER_ERRORS="${SHARDSYNC_UCX_PEER_ERRORS:-1}"

PLANS="$RESULTS/plans.h5"
RECORD=("$SS" plan record --layout "$LAYOUT" --out "$PLANS")
LAUNCH=(mpirun -np "$WORLD" --map-by "ppr:${TASKS_PER_NODE}:node" --bind-to none "${extra_mpirun[@]}"
        -x UCX_TLS -x UCX_NET_DEVICES -x NCCL_IB_DISABLE -x NCCL_NVLS_ENABLE -x SHARDSYNC_UCX_PEER_ERRORS
        "$SS" bench --layout "$LAYOUT" --memory "$MEMORY" --transport "$TRANSPORT" --plans "$PLANS"
        --engine "$ENGINES" --syncs "$SYNCS" --warmup 1 --measure-link "$MEASURE_LINK"
        "${buffer_flags[@]}" --json "$RESULTS/bench.json")
echo "# plans (offline, one rank): ${RECORD[*]}"
echo "# launch: ${LAUNCH[*]}"
if [[ $DRY_RUN == 1 ]]; then
  echo "# dry run: nothing launched"
  exit 0
fi
mkdir -p "$RESULTS"
"${RECORD[@]}"
"${LAUNCH[@]}" 2>&1 | tee "$RESULTS/bench.txt"
