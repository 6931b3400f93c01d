# Sourced by the GPU scripts: environment, output folders, and the logged step runner.
# The caller sets OUT (results) and LOGS (per-step logs) first, and SUM_MODE=append to keep
# an existing summary.txt.
mkdir -p "$OUT" "$LOGS"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
SUM="$OUT/summary.txt"
if [[ "${SUM_MODE:-}" == append ]]; then touch "$SUM"; else : > "$SUM"; fi
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)

say() { echo "$@" | tee -a "$SUM"; }

step() {  # name timeout command...: runs it into $LOGS/name.log, says its exit status and time
  local name="$1" limit="$2"; shift 2
  say "## $name: $*"
  local t0=$SECONDS
  timeout "$limit" "$@" > "$LOGS/$name.log" 2>&1
  local rc=$?
  say "## $name: exit $rc after $((SECONDS - t0)) s"
  return $rc
}
