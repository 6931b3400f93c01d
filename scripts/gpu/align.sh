#!/usr/bin/env bash
# Where the strided pieces lie (issue 17): the engine's copies of rows (o_proj and down_proj
# column halves) read at 59% of a contiguous copy in the kernel bench and the engine, while the
# strided sweep runs the same kernel on the same access pattern at the contiguous rate. The
# sweep's runs start at multiples of 4 KiB; the engine's tensors and parameters at multiples
# of 256 bytes. On the GPU host, every copy checked:
#   1. the strided sweep through a CUDA IPC mapping, with cases whose starts are 256 bytes off
#      a 4 KiB boundary (source, destination, both);
#   2. the kernel bench's TP2 rank 0 pieces (36 layers) with HF tensors and packed pieces at
#      multiples of 256 B, 4 KiB and 2 MiB (--align), locally and through IPC;
#   3. the engines one pass, Qwen3-8B TP1 -> TP2 and TP1 -> TP1, with the trainer's tensors and
#      the consumer's parameters at those alignments (SHARDSYNC_EXP_*_ALIGN);
#   4. ncu of TP1 -> TP2 v4 at the best alignment.
#
#   OUT=/tmp/out LOGS=/tmp/out/logs SHARDSYNC_COMMIT=<sha> scripts/gpu/align.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/align}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
say "# alignment of the strided pieces on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source ${SHARDSYNC_COMMIT:-?}"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
CFG="-DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90"
step build 400 bash -c "cmake -S . -B build-gpu $CFG && cmake --build build-gpu -j $(nproc)" || { tail -40 "$LOGS/build.log"; exit 1; }
step sweep-build 120 nvcc -O3 -arch=sm_90 -std=c++17 -Ilib -Ikernels bench/gpu/strided_sweep.cu -o "$LOGS/strided_sweep" -lcuda
step sweep-ipc 300 bash -c "'$LOGS/strided_sweep' 10 1 ipc > '$OUT/strided-sweep-ipc.jsonl'"
python3 - "$OUT/strided-sweep-ipc.jsonl" <<'EOF' | tee -a "$SUM"
import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if "case" in d:
        print("# %-5s %-20s %-9s jobs %-5d %7.1f GB/s one way, %d wrong" % (
            d["source"], d["case"], d["kernel"], d["jobs"], d["GBps_one_way"], d["wrong_units"]))
    else:
        print("# sweep", d)
EOF
KB="build-gpu/apps/shardsync-kernel-bench --model qwen3-8b --inference tp2 --device cuda --layers 36 --reps 10"
for a in 256 4096 2097152 256 4096 2097152; do
  for m in ipc local; do
    n=$((${n:-0} + 1))
    flag=""; [[ $m == ipc ]] && flag=--ipc
    step "kernels-$m-$a-$n" 300 $KB $flag --align $a --json "$OUT/kernels-$m-$a-$n.json"
    grep -E "^ *(memcpy|pack|strided|copy-ipc|pack-ipc|strided-ipc) " "$LOGS/kernels-$m-$a-$n.log" | sed "s/^/$m align $a: /" | tee -a "$SUM"
  done
done
SS=build-gpu/apps/shardsync
BUF="--send-buffer 1G --recv-buffer 1G --chunk 256M --inflight 2 --syncs 5 --warmup 1 -q"
for c in "tp2 3" "tp1 2"; do
  set -- $c
  for al in "256 256" "4096 4096" "2097152 2097152" "256 2097152" "2097152 256" "256 256" "2097152 2097152"; do
    read -r ta la <<< "$al"
    n=$((n + 1))
    name="qwen3-8b-tp1-$1-t$ta-l$la-$n"
    step "$name" 300 mpirun -np "$2" --bind-to none -x SHARDSYNC_EXP_TRAINER_ALIGN=$ta -x SHARDSYNC_EXP_LIVE_ALIGN=$la \
      $SS bench -m qwen3-8b -t tp1 -i "$1" --memory cuda -e v3,v4 $BUF --json "$OUT/$name.json"
    grep -E "^  *v[0-9]" "$LOGS/$name.log" | sed "s/^/$1 trainer $ta live $la: /" | tee -a "$SUM"
  done
done
wrap() {  # name trainer_align live_align: ncu on inference rank 0 (world rank 1), v4
  printf '%s\n' '#!/usr/bin/env bash' 'if [[ "$OMPI_COMM_WORLD_RANK" == 1 ]]; then' \
    "  exec ncu --clock-control none --kernel-name regex:'jobs_kernel' --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,launch__grid_size --csv --log-file $OUT/ncu-$1.csv \"\$@\"" \
    'fi' 'exec "$@"' > "$LOGS/ncu-wrap.sh"
  chmod +x "$LOGS/ncu-wrap.sh"
  step "ncu-$1" 300 mpirun -np 3 --bind-to none -x SHARDSYNC_EXP_TRAINER_ALIGN=$2 -x SHARDSYNC_EXP_LIVE_ALIGN=$3 "$LOGS/ncu-wrap.sh" \
    $SS bench -m qwen3-8b -t tp1 -i tp2 --memory cuda -e v4 --send-buffer 1G --recv-buffer 1G --chunk 256M --syncs 2 --warmup 1 -q --no-verify
  python3 scripts/gpu/ncu_summary.py "$OUT/ncu-$1.csv" | tee -a "$SUM"
}
wrap tp2-a256 256 256
wrap tp2-a2m 2097152 2097152
