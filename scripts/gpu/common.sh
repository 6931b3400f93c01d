# Sourced by the GPU scripts: environment, output folders, and the logged step runner.
# The caller sets OUT (results) and LOGS (per-step logs) first, and SUM_MODE=append to keep
# an existing summary.txt. A script that sources this exits 1 when any step failed (named in
# its last summary line), whatever its own last command returned.
mkdir -p "$OUT" "$LOGS"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
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
