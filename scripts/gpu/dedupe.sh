#!/usr/bin/env bash
# Node-level dedupe (--dedupe-node, issue 21) with weights in GPU memory on the GPU host, ranks
# sharing its GPU(s) and pretending to sit on nodes (SHARDSYNC_FAKE_HOSTS), copies inside a
# pretend node through CUDA IPC (--transport cuda_ipc):
#   exact: tests/engine/dedupe_check.sh on tiny-qwen3-moe, trainer TP1 -> DP4/EP4 (5 ranks),
#     every engine: 4 ranks a host (node 0 = the trainer and local ranks 0-2: R + 3E/4 over the
#     network, 2R copied inside it; node 4 = local rank 3: R + E/4), then all 5 on one node
#     (colocated: R + E over the network, 3R copied); every element verified;
#   mid-qwen3-moe (9.6 GiB), trainer TP1 -> DP4/EP4 on one node, every pull engine, full and
#     --dedupe-node alternately (one pair), the bytes each node took in and the times side by side.
# Build first (scripts/gpu/delta.sh builds build-gpu); BUILD=build-gpu.
#   OUT=/tmp/out LOGS=/tmp/logs scripts/gpu/dedupe.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${OUT:-results/gpu/dedupe}"
LOGS="${LOGS:-$OUT/logs}"
source scripts/gpu/common.sh
gpu_script_start "node-level dedupe"
tiny=(-m tiny-qwen3-moe -t tp1 -i dp4,ep4 --memory cuda --transport cuda_ipc --syncs 3 --warmup 1 -q)
step tiny-two-nodes 180 env SHARDSYNC_FAKE_HOSTS=4 EXPECT_HOSTS=0:694656,4:547200 EXPECT_NODE=946944 EXPECT_FULL=2188800 \
  KEEP_JSON="$OUT/tiny-two-nodes.json" tests/engine/dedupe_check.sh 5 "$SS" "${tiny[@]}"
grep -E "^ok|FAIL" "$LOGS/tiny-two-nodes.log" | tee -a "$SUM"
step tiny-one-node 180 env SHARDSYNC_FAKE_HOSTS=8 EXPECT_HOSTS=0:768384 EXPECT_NODE=1420416 EXPECT_FULL=2188800 \
  KEEP_JSON="$OUT/tiny-one-node.json" tests/engine/dedupe_check.sh 5 "$SS" "${tiny[@]}"
grep -E "^ok|FAIL" "$LOGS/tiny-one-node.log" | tee -a "$SUM"
mid=(-m mid-qwen3-moe -t tp1 -i dp4,ep4 -e v1,v2,v3,v4 --memory cuda --transport cuda_ipc --send-buffer 1G --recv-buffer 1G
     --chunk 64M --syncs 5 --warmup 1 -q)
for mode in full dedupe; do
  flags=(); [[ $mode == dedupe ]] && flags=(--dedupe-node)
  step "mid-$mode" 240 env SHARDSYNC_FAKE_HOSTS=8 mpirun --oversubscribe --bind-to none -np 5 "$SS" bench "${mid[@]}" "${flags[@]}" \
    --json "$OUT/mid-qwen3-moe-$mode.json"
  grep -E "^  v[0-9]|^# engine|^#  " "$LOGS/mid-$mode.log" | tee -a "$SUM"
done
python3 - "$OUT" <<'PY' | tee "$OUT/mid-qwen3-moe-summary.txt" | tee -a "$SUM"
import json, sys
out = sys.argv[1]
f, d = (json.load(open("%s/mid-qwen3-moe-%s.json" % (out, m))) for m in ("full", "dedupe"))
print("# mid-qwen3-moe trainer tp1 -> dp4,ep4 on one pretend node, one H200, commit %s: full against --dedupe-node" % d["git_sha"])
print("# engine  full_s   dedupe_s  network_MB(full)  network_MB(dedupe)  in_node_MB  wrong")
for a, b in zip(f["engines"], d["engines"]):
    print("  %-6s %8.4f %9.4f %17.1f %19.1f %11.1f %6d" % (a["engine"], a["time_s"]["avg"], b["time_s"]["avg"],
          a["network_bytes"] / 1e6, b["network_bytes"] / 1e6, b["node_bytes"] / 1e6, a["wrong"] + b["wrong"]))
PY
