#!/usr/bin/env bash
# Issues 39 and 40 on the GPU host, in two calls (each under 10 minutes; the build stays between
# them while the machine is warm):
#   scripts/gpu/library.sh check   build (CUDA, no UCX), the GPU, failure and api tests, and
#                                  examples/rl_step.py on torch CUDA tensors (numpy steps, real
#                                  AdamW, in the library's CUDA slots), every parameter checked
#   scripts/gpu/library.sh time [TP]
#                                  colocated Qwen3-8B tp1 -> tpTP (default 1; one call per TP) on
#                                  one GPU: the CLI's v3 and v4 (and v4 --checksum), the Python API on
#                                  the caller's torch.empty tensors (zero copy through the tensor
#                                  table), in the library's slots and in the slots with checksums,
#                                  interleaved twice, and (TP 1) the PyTorch peers; every sync verified
#   scripts/gpu/library.sh hash    the checksum kernels' cost alone (shardsync-kernel-bench's
#                                  direct / direct+hash / hash rows) and foreach_check.py
# Results and logs under $OUT (default $OUT_DIR or results/gpu/library). Run `make stamp` here
# first so that the copy's build records the commit.
set -u
what="${1:-check}"
tp_only="${2:-1}"
OUT="${OUT:-results/gpu/library}/$what"
[[ $what == time ]] && OUT="$OUT-tp$tp_only"
LOGS="$OUT/logs"
SUM_MODE=
source scripts/gpu/common.sh
BUILD=build-gpu
SS=$BUILD/apps/shardsync
PY=$(command -v python3)
export PYTHONPATH="$PWD/$BUILD/python:$PWD/examples:$PWD/bench"
say "# $what on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit), python $PY"
nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
if [[ ! -x $SS || ! -f $BUILD/python/shardsync/libshardsync.so ]]; then
  step build 600 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF -DSHARDSYNC_BUILD_BENCH=OFF \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DSHARDSYNC_PYTHON=$PY && cmake --build $BUILD -j $(nproc)"
fi
case "$what" in
  check)
    step tests 420 ctest --test-dir $BUILD -R 'Kernels\.|gpu\.|api\.|mpi\.failure|checksum' --output-on-failure --timeout 300
    for spec in "3|--model tiny-qwen3 --trainer tp1 --inference tp2 --torch cuda" \
                "6|--model tiny-qwen3-moe --trainer tp2,ep2 --inference tp2 --torch cuda --engine v2" \
                "4|--model tiny-qwen3-moe --trainer tp1,ep2 --inference dp2,ep2 --torch cuda --adamw" \
                "4|--model tiny-qwen3 --trainer tp2 --inference tp2 --torch cuda --in-slots --engine v4" \
                "3|--model tiny-qwen3 --trainer tp1 --inference tp2 --torch cuda --engine v4 --checksum" \
                "6|--model tiny-qwen3-moe --trainer tp2,ep2 --inference tp2 --torch cuda --engine v3 --checksum"; do
      np=${spec%%|*}; args=${spec#*|}
      name=rl_step_$(tr -c 'a-z0-9' _ <<<"${args// /}" | cut -c1-60)
      step "$name" 120 mpirun --oversubscribe -np "$np" "$PY" examples/rl_step.py $args
      grep -h "rl_step:" "$LOGS/$name.log" | tee -a "$SUM"
      grep -ho "staged [0-9]* B" "$LOGS/$name.log" | sort | uniq -c | sed 's/^/#   /' | tee -a "$SUM"
      grep -h "^shardsync:" "$LOGS/$name.log" | head -3 | tee -a "$SUM"
    done
    # PyTorch's expandable_segments (cuMem memory, no CUDA IPC handle): the trainer's tensors are
    # staged through their slots, named once; every parameter still bit-exact.
    step rl_step_expandable_segments 120 mpirun --oversubscribe -x PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True -np 3 \
      "$PY" examples/rl_step.py --model tiny-qwen3 --trainer tp1 --inference tp2 --torch cuda --engine v4
    grep -h "rl_step:\|^shardsync:" "$LOGS/rl_step_expandable_segments.log" | tee -a "$SUM"
    grep -ho "staged [0-9]* B" "$LOGS/rl_step_expandable_segments.log" | sort | uniq -c | sed 's/^/#   /' | tee -a "$SUM"
    ;;
  time)
    for round in 1 2; do
      for tp in $tp_only; do
        np=$((1 + tp))
        step "cli_tp$tp.r$round" 240 mpirun --oversubscribe -np $np $SS bench -m qwen3-8b -t tp1 -i tp$tp --memory cuda \
          -e v3,v4 --syncs 20 --warmup 2 -q --json "$OUT/cli-tp$tp-r$round.json"
        grep -E "^  v[34] " "$LOGS/cli_tp$tp.r$round.log" | tee -a "$SUM"
        step "cli_checksum_tp$tp.r$round" 240 mpirun --oversubscribe -np $np $SS bench -m qwen3-8b -t tp1 -i tp$tp --memory cuda \
          -e v4 --checksum --syncs 20 --warmup 2 -q --json "$OUT/cli-checksum-tp$tp-r$round.json"
        grep -E "^  v4 " "$LOGS/cli_checksum_tp$tp.r$round.log" | sed 's/$/   (--checksum)/' | tee -a "$SUM"
        for mode in torch-empty in-slots in-slots-checksum torch-empty-checksum; do
          flag=""; [[ $mode == in-slots ]] && flag=--in-slots
          [[ $mode == in-slots-checksum ]] && flag="--in-slots --checksum"
          [[ $mode == torch-empty-checksum ]] && flag="--checksum"
          step "api_${mode}_tp$tp.r$round" 240 mpirun --oversubscribe -np $np "$PY" bench/library_bench.py --model qwen3-8b \
            --config configs/models/qwen3-8b.json --inference-tp $tp --engine v4 --syncs 20 $flag --json "$OUT/api-$mode-tp$tp-r$round.json"
          grep -h "^library" "$LOGS/api_${mode}_tp$tp.r$round.log" | tee -a "$SUM"
        done
      done
    done
    if [[ $tp_only == 1 ]]; then
      step peers 300 "$PY" bench/peers/torch_peers.py --config configs/models/qwen3-8b.json --inference-tp 1 \
        --peer bucketed-ipc,ipc-per-tensor,ipc-kept,ipc-kept-foreach --syncs 20 --json "$OUT/peers-tp1.json"
      tail -5 "$LOGS/peers.log" | tee -a "$SUM"
    fi
    ;;
  hash)
    # --checksum's cost in the kernels alone: the one-pass copy with and without hashing what it
    # moves (the receiver's side), and the pieces hashed where they lie (the trainer's), on 12
    # blocks of Qwen3-8B, local and through a CUDA IPC mapping; then where torch's
    # _foreach_copy_ goes wrong for the ipc-kept-foreach peer.
    for ipc in "" --ipc; do
      name=kernel_hash${ipc:+_ipc}
      step "$name" 300 $BUILD/apps/shardsync-kernel-bench --model qwen3-8b --inference tp1 --device cuda --layers 12 --reps 5 \
        $ipc --json "$OUT/$name.json"
      grep -E "direct|hash|checksum" "$LOGS/$name.log" | tee -a "$SUM"
    done
    step foreach_check 180 "$PY" bench/peers/foreach_check.py --layers 2
    grep -h "foreach_check:" "$LOGS/foreach_check.log" | tee -a "$SUM"
    ;;
  *) echo "usage: $0 check | time [TP] | hash"; exit 2 ;;
esac
