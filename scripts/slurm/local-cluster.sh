#!/usr/bin/env bash
# local-cluster.sh start|stop DIR: a single-node Slurm on this machine, for running the
# project's own sbatch scripts for real (tests/cli/slurm_job.sh, make test-slurm). start
# writes DIR/slurm.conf for this host and its CPUs, starts munged, slurmctld and slurmd (as
# root, in the background, state and logs under DIR) and waits until the node is idle; it
# prints `export SLURM_CONF=DIR/slurm.conf` for the shell that submits. stop ends the three
# and leaves DIR. Exit 77 with the reason where Slurm is not installed or cannot start.
#
#   eval "$(scripts/slurm/local-cluster.sh start /tmp/slurm)"; sbatch --wait ...; scripts/slurm/local-cluster.sh stop /tmp/slurm
set -uo pipefail
cmd="${1:-}"; dir="${2:-}"
[[ ( "$cmd" == start || "$cmd" == stop ) && -n "$dir" ]] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
cant() { echo "local-cluster: Slurm cannot start here: $*" >&2; exit 77; }

stop_all() {
  for d in slurmd slurmctld munged; do
    [[ -f "$dir/run/$d.pid" ]] && kill "$(cat "$dir/run/$d.pid")" 2>/dev/null
  done
  for _ in $(seq 1 50); do
    alive=0
    for d in slurmd slurmctld munged; do
      [[ -f "$dir/run/$d.pid" ]] && kill -0 "$(cat "$dir/run/$d.pid")" 2>/dev/null && alive=1
    done
    [[ $alive == 0 ]] && break
    sleep 0.1
  done
  rm -f "$dir"/run/*.pid
}

if [[ "$cmd" == stop ]]; then
  stop_all
  exit 0
fi

for b in munged slurmctld slurmd sbatch scontrol sinfo; do
  command -v "$b" > /dev/null || cant "$b is not installed (Debian slurmctld, slurmd, slurm-client, munge: make deps-slurm)"
done
[[ "$(id -u)" == 0 ]] || cant "the daemons run as root here, and this is uid $(id -u)"
mkdir -p "$dir"/{state,spool,log,run,munge} || cant "cannot create $dir"
stop_all  # a previous start in the same DIR
host=$(hostname -s)
cpus=$(nproc)

# munge: a key of this cluster's own, its socket under DIR (slurm.conf's AuthInfo names it).
key="$dir/munge/munge.key"
[[ -s "$key" ]] || { dd if=/dev/urandom of="$key" bs=1024 count=1 status=none && chmod 600 "$key"; } || cant "cannot write $key"
sock="$dir/munge/munge.socket"
munged --force --key-file="$key" --socket="$sock" --pid-file="$dir/run/munged.pid" \
  --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munge.seed" 2> "$dir/log/munged.err" ||
  cant "munged did not start: $(tail -3 "$dir/log/munged.err" "$dir/log/munged.log" 2>/dev/null)"

cat > "$dir/slurm.conf" <<EOF
# Written by scripts/slurm/local-cluster.sh: one node, this host, $cpus CPUs.
ClusterName=shardsync-local
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=${SHARDSYNC_SLURMCTLD_PORT:-16817}
SlurmdPort=${SHARDSYNC_SLURMD_PORT:-16818}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
GresTypes=gpu
ReturnToService=2
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF="$dir/slurm.conf"
slurmctld -f "$SLURM_CONF" -i 2> "$dir/log/slurmctld.err" || cant "slurmctld did not start: $(tail -3 "$dir/log/slurmctld.err" "$dir/log/slurmctld.log" 2>/dev/null)"
slurmd -f "$SLURM_CONF" -N "$host" 2> "$dir/log/slurmd.err" || cant "slurmd did not start: $(tail -3 "$dir/log/slurmd.err" "$dir/log/slurmd.log" 2>/dev/null)"
for _ in $(seq 1 100); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null)
  [[ "$state" == idle ]] && { echo "export SLURM_CONF=$SLURM_CONF"; exit 0; }
  sleep 0.2
done
cant "node $host not idle after 20 s (state '${state:-none}'): $(tail -3 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" 2>/dev/null)"
