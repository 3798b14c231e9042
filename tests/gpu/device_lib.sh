# Shared by the scripts that run on a GPU host (device_run.sh, job_run.sh): steps under one
# deadline so a call never runs past its limit.  Source it after setting DEADLINE and STEPS.
SECONDS=0
left() { echo $((DEADLINE - SECONDS)); }
# run NAME LIMIT CMD...: runs CMD under min(LIMIT, time left); prints its status and duration.
run() {
  local name=$1 limit=$2
  shift 2
  local l
  l=$(left)
  [ "$l" -lt "$limit" ] && limit=$l
  if [ "$limit" -le 5 ]; then echo "=== $name: skipped (deadline)"; return 99; fi
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s): $*"
  timeout -k 5 "$limit" "$@"
  local rc=$?
  echo "=== $name: rc=$rc after $((SECONDS - t0)) s"
  return $rc
}
want() { [[ " $STEPS " == *" $1 "* ]]; }
