#!/usr/bin/env bash
# Records a plan, shows it, then checks that a truncated copy, a corrupted copy and a plan
# used with another model or layout are each refused with a clear message.
set -euo pipefail
ss="$1"; dir="$2"
mkdir -p "$dir"
"$ss" plan record --model tiny-qwen3-moe --inference dp2,ep2 --out "$dir/p.h5" >/dev/null
expect_in() {  # regex, command... (output captured whole: no SIGPIPE from an early grep exit)
  local regex="$1"; shift
  local out; out=$("$@")
  grep -Eq -- "$regex" <<<"$out" || { echo "FAIL: /$regex/ not in output of $*"; exit 1; }
}
expect_in "inference tp1,dp2,pp1,ep2, loaders of vLLM 0\.11\.0" "$ss" plan show "$dir/p.h5"
expect_in "experts.4.gate_proj.weight" "$ss" plan show "$dir/p.h5" --rank 1
expect_in '"hf_tensor"' "$ss" plan show "$dir/p.h5" --rank 0 --json
expect_fail() {  # regex, command...
  local regex="$1"; shift
  if out=$(timeout 60 "$@" 2>&1); then echo "FAIL: expected an error: $*"; exit 1; fi
  grep -Eq -- "$regex" <<<"$out" || { echo "FAIL: /$regex/ not in: $out"; exit 1; }
}
size=$(stat -c %s "$dir/p.h5")
head -c $((size / 2)) "$dir/p.h5" > "$dir/truncated.h5"
expect_fail "truncated.h5: \(header\) bytes: says [0-9]+ bytes of HDF5 data but the file has" "$ss" plan show "$dir/truncated.h5"
cp "$dir/p.h5" "$dir/corrupt.h5"
printf '\x42' | dd of="$dir/corrupt.h5" bs=1 seek=$((size - 100)) conv=notrunc status=none
expect_fail "corrupt.h5: \(header\) fnv1a: checksum mismatch" "$ss" plan show "$dir/corrupt.h5"
expect_fail "recorded for model tiny-qwen3-moe .* this run uses model tiny-kimi" "$ss" plan show "$dir/p.h5" --model tiny-kimi
expect_fail "--rank: 5: the file holds ranks 0..1" "$ss" plan show "$dir/p.h5" --rank 5
# Plans follow one vLLM release's rules, named in the file; a sync asking for the older
# shared-expert rule refuses plans recorded under the new one, on every rank.
"$ss" plan record --model tiny-kimi --inference tp2,dp2,ep4 --out "$dir/k.h5" >/dev/null
"$ss" plan record --model tiny-kimi --inference tp2,dp2,ep4 --shared-experts-tp --out "$dir/k-tp.h5" >/dev/null
expect_in "loaders of vLLM 0\.11\.0$" "$ss" plan show "$dir/k.h5"
expect_in "loaders of vLLM 0\.11\.0 with shared experts split over TP" "$ss" plan show "$dir/k-tp.h5"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
expect_fail "k.h5: attribute 'vllm': recorded following vLLM 0\.11\.0, but this run follows vLLM 0\.11\.0 with shared experts split over TP" \
  mpirun --oversubscribe -np 6 "$ss" sync -m tiny-kimi -t tp2 -i tp2,dp2,ep4 --shared-experts-tp --plans "$dir/k.h5" --syncs 1 -q
echo "ok"
