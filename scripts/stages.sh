# scripts/stages.sh - sourced by the GPU scripts (gpu_check.sh, multi_gpu.sh):
# the stages asked for on the command line and one way to run and log a step.
# The caller sets LOG (a folder) and default_stages (an array) first.
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=("${default_stages[@]}")
want() { [[ " ${stages[*]} " == *" $1 "* ]]; }
status=0
step() {  # step NAME LOG CMD...: runs CMD into $LOG/LOG, prints its status, records failure
  local name=$1 log=$2; shift 2
  local t0=$SECONDS
  "$@" > "$LOG/$log" 2>&1
  local rc=$?
  echo "== $name: rc=$rc, $((SECONDS - t0)) s (log $log)"
  [ $rc -ne 0 ] && status=1 && tail -n 30 "$LOG/$log"
  return $rc
}
