#!/usr/bin/env bash
# The committed CPU comparison: all four engines on local ranks, host memory, UCX, every
# byte verified. Writes results/cpu/<name>.{json,txt}; the .txt starts with the command.
# Usage: scripts/bench-cpu.sh [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build}"
ss="$build/apps/shardsync"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mkdir -p results/cpu
run() {  # name np args...
  local name="$1" np="$2"; shift 2
  local cmd="mpirun --oversubscribe -np $np $ss bench $* --json results/cpu/$name.json"
  echo "== $name: $cmd" >&2
  {
    echo "# command: $cmd"
    echo "# machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), $(uname -sr)"
    $cmd -q 2>&1
  } | tee "results/cpu/$name.txt"
}
run mini-moe-ep 6 -m mini-qwen3-moe -t tp2,ep2,etp1 -i dp2,ep2 -r 2 --syncs 3 --warmup 1
run qwen3-0.6b-tp 4 -m qwen3-0.6b -t tp2 -i tp1 -r 2 --syncs 3 --warmup 1
