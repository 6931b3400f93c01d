#!/usr/bin/env bash
# scripts/test-configs.sh [OUT_DIR]: the CTest suite on the build configurations that leave out
# optional parts, each in its own build directory, so that a skip is a skip and never a red:
#   minimal   -DSHARDSYNC_UCX=OFF -DSHARDSYNC_CUDA=OFF, and gnuplot hidden from the tests (in a
#             private mount namespace its alternatives link leads nowhere);
#   no-ucx    -DSHARDSYNC_UCX=OFF with CUDA as found (the GPU host's configuration).
# CONFIGS="minimal no-ucx" picks them. Each writes OUT_DIR/<config>.txt: the configuration, the
# commit, then CTest's summary with every test that failed or skipped and its reason. Exit 1
# when any test failed. Root is needed for the mount namespace (the dev VM and CI run as root).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-build-configs}"
mkdir -p "$out"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo '?')
[[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]] || commit="$commit-dirty"
jobs=$(nproc)
rc=0
for cfg in ${CONFIGS:-minimal no-ucx}; do
  case "$cfg" in
    minimal) flags=(-DSHARDSYNC_UCX=OFF -DSHARDSYNC_CUDA=OFF); hide_gnuplot=1 ;;
    no-ucx) flags=(-DSHARDSYNC_UCX=OFF); hide_gnuplot=0 ;;
    *) echo "$0: unknown configuration '$cfg' (minimal, no-ucx)" >&2; exit 2 ;;
  esac
  dir="build-$cfg"
  log="$out/$cfg.log"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${flags[@]}" > "$log" 2>&1 &&
    cmake --build "$dir" -j "$jobs" >> "$log" 2>&1 || { echo "$0: $cfg: the build failed; see $log" >&2; rc=1; continue; }
  run="ctest --test-dir $dir -j $jobs --timeout 900 -LE gate-self"
  if [[ $hide_gnuplot == 1 ]] && command -v gnuplot > /dev/null; then
    # gnuplot as if not installed: Debian's /usr/bin/gnuplot is a link through
    # /etc/alternatives, so a copy of that directory without gnuplot's entry is mounted over it
    # in a private mount namespace (the link then leads nowhere; every other alternative stays).
    [[ "$(readlink /usr/bin/gnuplot)" == /etc/alternatives/gnuplot ]] ||
      { echo "$0: cannot hide gnuplot: /usr/bin/gnuplot is not Debian's alternatives link" >&2; exit 2; }
    alt=$(realpath "$out")/alternatives
    rm -rf "$alt" && cp -a /etc/alternatives "$alt" && rm -f "$alt"/gnuplot*
    unshare -m bash -c "mount --bind $alt /etc/alternatives && ! command -v gnuplot > /dev/null && $run" > "$out/$cfg.ctest.txt" 2>&1
  else
    bash -c "$run" > "$out/$cfg.ctest.txt" 2>&1
  fi
  crc=$?
  {
    echo "# configuration $cfg: cmake ${flags[*]}$([[ $hide_gnuplot == 1 ]] && echo ', gnuplot hidden'), commit $commit, $(date -u +%Y-%m-%dT%H:%MZ), $jobs cores"
    grep -E "tests passed|tests failed" "$out/$cfg.ctest.txt"
    grep -E "\*\*\*(Failed|Not Run|Timeout)|\*\*\*Skipped| Skipped " "$out/$cfg.ctest.txt" | sed -E 's/ +/ /g'
    # The reason each skipped test printed (its SKIP: line), from CTest's log.
    grep -hE "^SKIP: " "$dir/Testing/Temporary/LastTest.log" 2>/dev/null | sort | uniq -c | sed 's/^ */  /'
  } > "$out/$cfg.txt"
  cat "$out/$cfg.txt"
  [[ $crc == 0 ]] || rc=1
done
exit $rc
