#!/usr/bin/env bash
# slurm_dry_run.sh SCRIPT SHARDSYNC WORLD LAST_TRAINER FIRST_INFERENCE LAST_INFERENCE
# Checks an sbatch script's --dry-run: trainer and inference ranks on separate nodes, one
# rank per GPU (8 per node), and the launch line's rank count.
set -u
script="$1" ss="$2" world="$3" lt="$4" fi="$5" li="$6"
out=$(SHARDSYNC_BIN="$ss" timeout 120 "$script" --dry-run 2>&1) || { echo "FAIL: dry run exited non-zero"; echo "$out" | tail; exit 1; }
node_of() { awk -v r="$1" '$1 == r { print $NF }' <<<"$out"; }
role_of() { awk -v r="$1" '$1 == r { print $2 }' <<<"$out"; }
[[ "$(role_of "$lt")" == trainer && "$(node_of "$lt")" == $((lt / 8)) ]] || { echo "FAIL: rank $lt"; echo "$out" | tail; exit 1; }
[[ "$(role_of "$fi")" == inference && "$(node_of "$fi")" == $((fi / 8)) ]] || { echo "FAIL: rank $fi"; exit 1; }
[[ "$(role_of "$li")" == inference && "$(node_of "$li")" == $((li / 8)) ]] || { echo "FAIL: rank $li"; exit 1; }
(( $(node_of "$lt") < $(node_of "$fi") )) || { echo "FAIL: trainer and inference share a node"; exit 1; }
grep -q "launch: mpirun -np $world --map-by ppr:8:node" <<<"$out" || { echo "FAIL: launch line"; exit 1; }
grep -q "plans (offline, one rank): .* plan record" <<<"$out" || { echo "FAIL: no offline plan recording"; exit 1; }
echo "ok: $world ranks, trainers end at node $(node_of "$lt"), inference from node $(node_of "$fi") to $(node_of "$li")"
