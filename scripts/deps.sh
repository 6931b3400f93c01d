#!/usr/bin/env bash
# Installs the Debian packages shardsync builds and tests with, if any are missing.
# Idempotent: prints "deps: all present" and does nothing when everything is installed.
# Where it cannot install (not root, or no apt-get), it prints the exact list and fails.
#   scripts/deps.sh           the build and test set
#   scripts/deps.sh --slurm   the optional set for a real Slurm job (make deps-slurm):
#                             slurmctld, slurmd, slurm-client, munge (tests/cli/slurm_job.sh)
set -euo pipefail

packages=(
  cmake make ninja-build g++ pkg-config
  libopenmpi-dev openmpi-bin
  libucx-dev
  libhdf5-dev hdf5-tools
  libcli11-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  gnuplot-nox python3 python3-numpy python3-mpi4py
  clang libclang-rt-14-dev
)
if [[ "${1:-}" == --slurm ]]; then
  packages=(slurmctld slurmd slurm-client munge)
elif [[ -n "${1:-}" ]]; then
  echo "deps: unknown option '$1' (expected none or --slurm)" >&2
  exit 2
fi

if [[ "${SHARDSYNC_SKIP_DEPS:-0}" == 1 ]]; then
  echo "deps: SHARDSYNC_SKIP_DEPS=1, not checking packages"
  exit 0
fi

if ! command -v dpkg-query >/dev/null 2>&1; then
  echo "deps: this is not a Debian-based system (no dpkg-query)." >&2
  echo "deps: install the equivalents of: ${packages[*]}" >&2
  echo "deps: then run with SHARDSYNC_SKIP_DEPS=1" >&2
  exit 1
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all present"
  exit 0
fi

echo "deps: missing Debian packages: ${missing[*]}"
if [[ "$(id -u)" -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
  echo "deps: cannot install them here (need root and apt-get). Run:" >&2
  echo "  sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "deps: installed ${missing[*]}"
