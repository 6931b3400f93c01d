# Sourced by the GPU scripts: environment, output folders, and the logged step runner.
# The caller sets OUT (results) and LOGS (per-step logs) first, and SUM_MODE=append to keep
# an existing summary.txt. A script that sources this exits 1 when any step failed (named in
# its last summary line), whatever its own last command returned.
mkdir -p "$OUT" "$LOGS"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# The GPU host's copy of the tree carries a .git of an older snapshot (results of 2026-12-07 were
# labelled with it): no git there, so builds and scripts take the commit from .shardsync-commit
# (make stamp, carried with the tree), or say "unknown".
export GIT_DIR=/nonexistent/shardsync-copy-has-no-git
source_commit() { head -1 .shardsync-commit 2>/dev/null || echo unknown; }
SUM="$OUT/summary.txt"
if [[ "${SUM_MODE:-}" == append ]]; then touch "$SUM"; else : > "$SUM"; fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)

say() { echo "$@" | tee -a "$SUM"; }

FAILED_STEPS=()
step() {  # name timeout command...: runs it into $LOGS/name.log, says its exit status and time
  local name="$1" limit="$2"; shift 2
  say "## $name: $*"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  say "## $name: exit $rc after $((SECONDS - t0)) s"
  [[ $rc == 0 ]] || FAILED_STEPS+=("$name (exit $rc)")
  return $rc
}

expected_failure() {  # name: that step was meant to fail (a mutant's test): not a failure of the run
  local keep=() s
  for s in "${FAILED_STEPS[@]}"; do [[ "$s" == "$1 (exit "* ]] || keep+=("$s"); done
  FAILED_STEPS=("${keep[@]}")
}

report_steps() {
  local rc=$?
  if [[ ${#FAILED_STEPS[@]} -gt 0 ]]; then say "# FAILED: ${FAILED_STEPS[*]}"; exit 1; fi
  exit $rc
}
trap report_steps EXIT

# The opening of a script that needs only the shardsync binary: BUILD (default build-gpu) and SS,
# a first summary line naming the source commit, the GPUs, and the build where there is none yet
# (a later script on the same host reuses it).
gpu_script_start() {  # title
  BUILD="${BUILD:-build-gpu}"
  SS="$BUILD/apps/shardsync"
  say "# $1 on the GPU host, $(date -u +%Y-%m-%dT%H:%MZ), source $(source_commit)"
  nvidia-smi -L | sed 's/^/# /' | tee -a "$SUM"
  [[ -x "$SS" ]] || step build 600 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DSHARDSYNC_UCX=OFF \
    -DSHARDSYNC_BUILD_BENCH=OFF -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build $BUILD -j $(nproc) --target shardsync"
}
