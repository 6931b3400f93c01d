#!/usr/bin/env bash
# staging_peak.sh SHARDSYNC: V3's inference-side staging peak counts a layerwise buffer until
# the background copy out of it completed, not until it was queued. With the background lane
# delayed (SHARDSYNC_TEST_SLOW_BACKGROUND_MS) every weight group lands before the first copy
# runs, so the peak must hold the receive buffer plus (nearly) every group's buffer at once.
set -u
ss="$1"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
recv=16777216
SHARDSYNC_TEST_SLOW_BACKGROUND_MS=40 timeout 120 mpirun --oversubscribe -np 2 "$ss" bench -m tiny-qwen3 -t tp1 -i tp1 -e v3 \
  --layerwise --recv-buffer $recv --syncs 2 --warmup 1 -q --json "$dir/out.json" >"$dir/log" 2>&1 ||
  { echo "FAIL: the run failed"; tail -20 "$dir/log"; exit 1; }
python3 - "$dir/out.json" $recv <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); recv = int(sys.argv[2])
e = [x for x in d["engines"] if x["engine"] == "v3"][0]
peak, moved = e["inference_peak_staging_bytes"]["min"], e["bytes_moved"]
want = recv + 0.9 * moved
print("v3 inference peak %d bytes: receive buffer %d + %.0f staged in layerwise buffers (moved %d)" % (peak, recv, peak - recv, moved))
if e["wrong"] != 0:
    sys.exit("FAIL: %s wrong elements" % e["wrong"])
if peak < want:
    sys.exit("FAIL: peak %d < %d: layerwise buffers left the count before their background copies ran" % (peak, want))
print("ok")
PY
