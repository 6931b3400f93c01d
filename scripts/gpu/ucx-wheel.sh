#!/usr/bin/env bash
# Unpacks the libucx-cu13 wheel (UCX built with CUDA 13) into a prefix a shardsync build can
# use: -DSHARDSYNC_UCX_ROOT=DEST/libucx, LD_LIBRARY_PATH=DEST/libucx/lib at run time. For
# tests on the GPU host only; on a cluster UCX comes from the site (HPC-X, modules).
#
#   pip download --no-deps libucx-cu13==1.22.0 -d .carry     # on the dev machine
#   scripts/gpu/ucx-wheel.sh .carry/libucx_cu13-*.whl .carry/ucx
#
# Keeps the wheel's layout (libucx/ beside libucx_cu13.libs/, where libucm_cuda finds its
# CUDA runtime through $ORIGIN), drops the static archives, libtool files, the tools but
# ucx_info, and the perftest module, and turns the copies that zip made of each library's
# symlinks back into symlinks: about 20 MB instead of 147.
set -euo pipefail
[[ $# == 2 ]] || { echo "usage: $0 WHEEL DEST" >&2; exit 2; }
wheel="$1" dest="$2"
[[ -f "$wheel" ]] || { echo "$0: $wheel: no such wheel" >&2; exit 1; }
rm -rf "$dest"
mkdir -p "$dest"
python3 -m zipfile -e "$wheel" "$dest"
root="$dest/libucx"
[[ -f "$root/include/ucp/api/ucp.h" && -d "$root/lib" ]] || { echo "$0: $wheel has no libucx/include or lib" >&2; exit 1; }
find "$root/bin" -type f ! -name ucx_info -delete  # ucx_info -d lists the transports
chmod +x "$root/bin/ucx_info"
rm -rf "$root/share" "$root/lib/cmake" "$root/lib/pkgconfig"
find "$root" \( -name '*.a' -o -name '*.la' -o -name '*perftest*' \) -delete
rm -f "$dest"/libucx_cu13.libs/libgomp-*  # used by the perftest module only
# libX.so.0.0.0 is the library; libX.so.0 and libX.so were copies of it.
find "$root/lib" -name '*.so.*.*.*' | while read -r real; do
  dir=$(dirname "$real") base=$(basename "$real")
  stem=${base%%.so.*}
  major=${base#"$stem".so.}; major=${major%%.*}
  for link in "$stem.so.$major" "$stem.so"; do
    [[ -e "$dir/$link" ]] && cmp -s "$dir/$link" "$real" && ln -sf "$base" "$dir/$link"
  done
done
echo "$root: UCX $(cat "$root/UCX_WHEEL_VERSION.txt" 2>/dev/null || echo '?') ($(du -sh "$dest" | cut -f1))"
