#!/usr/bin/env bash
# report_plots.sh SS RESULTS_DIR OUT_DIR: shardsync report writes the three PNGs (and the data
# and gnuplot scripts behind them) for committed CPU and GPU results.
set -u
ss="$1"; results="$2"; out="$3"
# Plots need gnuplot (a missing feature, not a defect: CTest shows the test skipped).
command -v gnuplot > /dev/null || { echo "SKIP: gnuplot is not installed (Debian gnuplot-nox; make deps installs it)"; exit 77; }
rm -rf "$out"
log=$(timeout 120 "$ss" report "$results"/cpu/*.json "$results"/gpu/2xh200/dense.json --plots "$out" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: exit $rc"; echo "$log"; exit 1; }
for p in time-per-engine bandwidth phases; do
  [[ -s "$out/$p.png" ]] || { echo "FAIL: $out/$p.png missing or empty"; echo "$log"; exit 1; }
  [[ "$(head -c 8 "$out/$p.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] || { echo "FAIL: $p.png is not a PNG"; exit 1; }
  grep -q "gpu/2xh200/dense" "$out/$p.dat" || { echo "FAIL: $p.dat lacks the GPU run"; exit 1; }
  grep -q "# wrote $out/$p.png" <<<"$log" || { echo "FAIL: no 'wrote' line for $p.png"; echo "$log"; exit 1; }
done
# The GPU run measured its link: the bandwidth data carries it (395 GB/s in that run).
awk '/dense/ {print $NF}' "$out/bandwidth.dat" | grep -Eq '^3[0-9][0-9]\.' || { echo "FAIL: link column missing"; cat "$out/bandwidth.dat"; exit 1; }
# The PyTorch peers' result files stand next to the engines in the plots, not only the table.
peers="$out/peers"
log=$(timeout 120 "$ss" report "$results"/gpu/one-pass/qwen3-8b-tp1-tp1.json "$results"/gpu/one-pass/peers-qwen3-8b-tp1-tp1.json \
  --plots "$peers" 2>&1) || { echo "FAIL: report with peers: $log"; exit 1; }
grep -q '^# run .* peer:bucketed-ipc' "$peers/time-per-engine.dat" || { echo "FAIL: no peer column"; cat "$peers/time-per-engine.dat"; exit 1; }
grep 'peers-qwen3-8b-tp1-tp1"' "$peers/time-per-engine.dat" | grep -Eq ' 0\.0[0-9]+' ||
  { echo "FAIL: the peers' run has no time"; cat "$peers/time-per-engine.dat"; exit 1; }
grep -q "title 'peer:bucketed-ipc'" "$peers/time-per-engine.gp" || { echo "FAIL: no peer bars"; cat "$peers/time-per-engine.gp"; exit 1; }
# A plots directory whose name a shell would expand or a gnuplot string would end.
odd="$out/it's \$HOME \"q\" \`x\`"
log=$(timeout 120 "$ss" report "$results"/cpu/mini-moe-ep.json --plots "$odd" 2>&1) || { echo "FAIL: odd directory name: $log"; exit 1; }
for p in time-per-engine bandwidth phases; do
  [[ -s "$odd/$p.png" ]] || { echo "FAIL: $odd/$p.png missing"; echo "$log"; ls -la "$out"; exit 1; }
done
echo "ok: three PNGs with their data, also under an odd directory name"
