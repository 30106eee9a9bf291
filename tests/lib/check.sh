# shellcheck shell=bash
# Pass/fail bookkeeping for the shell system tests. Sourced by them.
#
#   source tests/lib/check.sh
#   check "h0 pings h1" ping -c1 10.0.10.2       # PASS when the command exits 0,
#                                                #   else FAIL and its output's tail
#   check_not "no leak" ping -c1 10.0.20.2       # PASS when the command fails
#   fail "aggswitch did not come up"             # a FAIL without a command
#   finish                                       # the tally; returns 0 only if nothing failed
#
# A check's output (stdout and stderr) is shown only when it fails, its last
# CHECK_TAIL_LINES lines (30 unless set). What a check passes to report is
# shown under its PASS or FAIL line either way (the figures a log keeps):
#
#   report "job 7: 6.1 ms against 5.8 ms clean"
PASSED=0
FAILED=0
CHECK_TAIL_LINES=${CHECK_TAIL_LINES:-30}

# check WHAT COMMAND [ARGS...]
check() {
  local what="$1" out rc
  shift
  out=$(mktemp /tmp/aggswitch-check.XXXXXX)
  CHECK_REPORT=$(mktemp /tmp/aggswitch-report.XXXXXX)
  "$@" >"$out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    PASSED=$((PASSED + 1)); echo "PASS  $what"
    sed 's/^/      /' "$CHECK_REPORT"
  else
    FAILED=$((FAILED + 1)); echo "FAIL  $what"
    sed 's/^/      /' "$CHECK_REPORT"
    tail -n "$CHECK_TAIL_LINES" "$out" | sed 's/^/      /'
  fi
  rm -f "$out" "$CHECK_REPORT"
  CHECK_REPORT=""
  return "$rc"
}

# report TEXT: inside a check, a line shown under its result; outside one,
# printed at once.
report() {
  if [ -n "${CHECK_REPORT:-}" ]; then echo "$*" >>"$CHECK_REPORT"; else echo "      $*"; fi
}

# check_not WHAT COMMAND [ARGS...]
check_not() {
  local what="$1"
  shift
  if "$@" >/dev/null 2>&1; then
    FAILED=$((FAILED + 1)); echo "FAIL  $what (succeeded, must not)"
    return 1
  fi
  PASSED=$((PASSED + 1)); echo "PASS  $what"
}

# fail WHAT: counts a failure found outside check.
fail() {
  FAILED=$((FAILED + 1)); echo "FAIL  $1"
}

finish() {
  echo "${PASSED} passed, ${FAILED} failed"
  [ "$FAILED" -eq 0 ]
}
