# shellcheck shell=bash disable=SC2034  # BENCH_LAST_STATUS is read by the sourcing script
# Shell helpers for the benchmarks in bench/: logging, child processes that are
# always reaped, command FIFOs for interactive DPDK apps, and polling with a
# deadline. Source it; it defines functions and the BENCH_PIDS list only.
#
#   source "$(dirname "$0")/lib.sh"
#   trap bench_kill_all EXIT
#   bench_spawn "$dir/dut.log" dpdk-testpmd ...   # sets BENCH_LAST_PID
#   bench_wait_until 20 test -S "$sock" || bench_die "testpmd did not listen"

BENCH_PIDS=()        # every background process we started, oldest first
BENCH_LAST_PID=""    # the pid bench_spawn started last
BENCH_LAST_STATUS=0  # the exit status bench_stop_pid reaped last

bench_log() { printf '%s\n' "$*" >&2; }
bench_die() {
  printf 'error: %s\n' "$*" >&2
  exit 1
}

# Seconds since the epoch with microseconds, without forking.
bench_now() { printf '%s' "$EPOCHREALTIME"; }

# Sleeps until the absolute time $1 (seconds since the epoch); returns at once
# if it has passed.
bench_sleep_until() {
  local left
  left=$(awk -v t="$1" -v n="$EPOCHREALTIME" 'BEGIN { d = t - n; printf "%.3f", (d > 0 ? d : 0) }')
  [ "$left" = "0.000" ] || sleep "$left"
}

# bench_spawn LOG CMD...: runs CMD in the background with stdout and stderr in
# LOG and stdin from /dev/null, and remembers its pid for bench_kill_all.
bench_spawn() {
  local log="$1"
  shift
  "$@" </dev/null >"$log" 2>&1 &
  BENCH_LAST_PID=$!
  BENCH_PIDS+=("$BENCH_LAST_PID")
}

# bench_spawn_fifo LOG FIFO CMD...: like bench_spawn, but CMD reads its stdin
# from the new FIFO. A holder process keeps the FIFO open for writing, so CMD
# only sees end-of-file once bench_fifo_close FIFO runs.
bench_spawn_fifo() {
  local log="$1" fifo="$2"
  shift 2
  rm -f "$fifo"
  mkfifo "$fifo"
  # Opened read-write, so neither side blocks waiting for the other.
  sleep infinity 1<>"$fifo" &
  BENCH_PIDS+=("$!")
  printf '%s\n' "$!" >"$fifo.holder"
  "$@" <"$fifo" >"$log" 2>&1 &
  BENCH_LAST_PID=$!
  BENCH_PIDS+=("$BENCH_LAST_PID")
}

# Writes one line to the FIFO's reader. Never blocks, even if the reader died.
bench_fifo_send() { printf '%s\n' "$2" 1<>"$1"; }

# Ends the holder: the reader sees end-of-file on its stdin.
bench_fifo_close() {
  local holder
  holder=$(cat "$1.holder" 2>/dev/null) || return 0
  bench_stop_pid "$holder" 0 || true  # the holder only ends by a signal
  rm -f "$1" "$1.holder"
}

# True while PID runs (a zombie waiting to be reaped does not count).
bench_alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat="${stat##*) }"
  [ "${stat%% *}" != Z ]
}

# bench_stop_pid PID GRACE: gives PID GRACE seconds to exit on its own (after
# the caller asked it to), then SIGTERM and 5 more seconds, then SIGKILL. Reaps
# it and leaves its exit status in BENCH_LAST_STATUS. Returns 1 if it had to be
# signalled, so callers can warn.
bench_stop_pid() {
  local pid="$1" grace="$2" deadline forced=0
  BENCH_LAST_STATUS=0
  [ -n "$pid" ] || return 0
  deadline=$(awk -v n="$EPOCHREALTIME" -v g="$grace" 'BEGIN { printf "%.3f", n + g }')
  while bench_alive "$pid" && awk -v n="$EPOCHREALTIME" -v d="$deadline" 'BEGIN { exit !(n < d) }'; do
    sleep 0.1
  done
  if bench_alive "$pid"; then
    forced=1
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do bench_alive "$pid" || break; sleep 0.1; done
  fi
  if bench_alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null || BENCH_LAST_STATUS=$?
  bench_forget_pid "$pid"
  return "$forced"
}

# Drops a reaped pid from BENCH_PIDS, so that a later clean-up cannot signal
# an unrelated process that has been given the same pid.
bench_forget_pid() {
  local i
  for i in "${!BENCH_PIDS[@]}"; do
    if [ "${BENCH_PIDS[$i]}" = "$1" ]; then unset 'BENCH_PIDS[i]'; fi
  done
  BENCH_PIDS=("${BENCH_PIDS[@]}")
}

# Stops everything bench_spawn* started that is still running, newest first.
bench_kill_all() {
  local i pid
  for ((i = ${#BENCH_PIDS[@]} - 1; i >= 0; i--)); do
    pid="${BENCH_PIDS[$i]}"
    if bench_alive "$pid"; then kill -TERM "$pid" 2>/dev/null || true; fi
  done
  for pid in "${BENCH_PIDS[@]}"; do
    bench_stop_pid "$pid" 0 || true
  done
  BENCH_PIDS=()
}

# bench_wait_until TIMEOUT CMD...: polls CMD every 0.2 s until it succeeds.
# Returns 1 after TIMEOUT seconds.
bench_wait_until() {
  local timeout="$1" deadline
  shift
  deadline=$(awk -v n="$EPOCHREALTIME" -v t="$timeout" 'BEGIN { printf "%.3f", n + t }')
  until "$@" 2>/dev/null; do
    awk -v n="$EPOCHREALTIME" -v d="$deadline" 'BEGIN { exit !(n < d) }' || return 1
    sleep 0.2
  done
}

# CPU time (clock ticks, user + system, all threads) that the given processes
# have used so far. Processes that are gone count 0.
bench_cpu_ticks() {
  local pid total=0 rest
  for pid in "$@"; do
    rest=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
    rest="${rest##*) }"  # drop "pid (comm) ", comm may contain spaces
    total=$((total + $(awk '{ print $12 + $13 }' <<<"$rest")))
  done
  printf '%s' "$total"
}

# The median of the numbers on stdin, one a line.
bench_median() {
  sort -g | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

# Bytes in a size such as 16M (powers of 1024, as agg-worker's --size).
bench_size_bytes() {
  local n="${1%[KM]}"
  case "$1" in *K) echo $((n << 10)) ;; *M) echo $((n << 20)) ;; esac
}

# Timed allreduces per run of an allreduce benchmark for size $1: $2 when it
# is given and not empty (the script's --iterations), else about 2 s of
# Gloo time per run at the least, and enough samples for a median at the
# most.
bench_iterations_for() {
  if [ -n "${2:-}" ]; then echo "$2"; return; fi
  local b
  b=$(bench_size_bytes "$1")
  if [ "$b" -le $((4 << 20)) ]; then echo 30
  elif [ "$b" -le $((32 << 20)) ]; then echo 10
  else echo 5; fi
}

# The first free TCP port on 127.0.0.1 at or above $1.
bench_free_tcp_port() {
  local port="$1"
  while [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ]; do port=$((port + 1)); done
  printf '%s' "$port"
}

# Waits up to $1 seconds for the CPUs to go idle (call it when nothing of ours runs).
bench_wait_for_idle() {
  local deadline=$((SECONDS + $1)) busy
  while busy=$(bench_cpu_busy_percent) && [ "$busy" -ge 10 ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      bench_log "    the CPUs are still ${busy}% busy after $1 s; going on"
      return 0
    fi
    bench_log "    the CPUs are ${busy}% busy with other work; waiting for them to go idle"
    sleep 9
  done
}

# bench_retry_disturbed WHY CHECK_FN RUN_FN ARGS...: runs `RUN_FN ARGS...
# ATTEMPT`, which must set RUN (its run directory, with results.tsv); runs it
# again, up to $RETRIES times, while CHECK_FN says the run was disturbed (WHY
# says how), keeps the last attempt and appends its results.tsv to $RESULTS.
bench_retry_disturbed() {
  local why="$1" check="$2" run_fn="$3" attempt
  shift 3
  for ((attempt = 1; ; attempt++)); do
    "$run_fn" "$@" "$attempt"
    "$check" || break
    if [ "$attempt" -gt "$RETRIES" ]; then
      bench_log "    still disturbed after $RETRIES retries: kept, and flagged in the summary"
      break
    fi
    bench_log "    disturbed: $why"
    bench_wait_for_idle 120
  done
  cat "$RUN/results.tsv" >>"$RESULTS"
}

# bench_run_measured WHO RUN_FN ARGS...: bench_retry_disturbed for a DUT and a
# generator (WHO) that should own the 2 CPUs: RUN_FN sets RUN_SHARE, their
# share, and a run is disturbed while it is below $MIN_CPU_SHARE.
bench_dut_starved() { awk -v s="$RUN_SHARE" -v m="$MIN_CPU_SHARE" 'BEGIN { exit !(s < m) }'; }
bench_run_measured() {
  local who="$1"
  shift
  bench_retry_disturbed "the DUT and $who got less than ${MIN_CPU_SHARE} of the 2 CPUs" \
    bench_dut_starved "$@"
}

# bench_run_measured_alone RUN_FN ARGS...: bench_retry_disturbed for
# benchmarks whose own processes fill the CPUs: RUN_FN sets OTHER_SHARE, the
# share processes not ours used, and a run is disturbed while it is above
# $MAX_OTHER_SHARE.
bench_others_busy() { awk -v s="$OTHER_SHARE" -v m="$MAX_OTHER_SHARE" 'BEGIN { exit !(s > m) }'; }
bench_run_measured_alone() {
  bench_retry_disturbed "other processes used more than ${MAX_OTHER_SHARE} of the 2 CPUs" \
    bench_others_busy "$@"
}

# How busy the CPUs were over one second, in percent.
bench_cpu_busy_percent() {
  local a b
  a=$(head -n1 /proc/stat)
  sleep 1
  b=$(head -n1 /proc/stat)
  awk -v a="$a" -v b="$b" 'BEGIN {
    n = split(a, x); split(b, y); total = 0
    for (i = 2; i <= n; i++) total += y[i] - x[i]
    idle = (y[5] - x[5]) + (y[6] - x[6])
    printf "%.0f", total ? 100 * (total - idle) / total : 0 }'
}

# Prints the calling script's header comment (its help) and exits with $1.
bench_usage() {
  sed -n '2,/^set -Eeuo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit "${1:-0}"
}

# bench/parse_stats.py, which every benchmark reads its samples with.
bench_parse() { python3 "$BENCH/parse_stats.py" "$@"; }

# Fails the benchmark because of DUT $1, saying why ($2) and showing the end
# of $RUN/dut.log.
bench_dut_failed() {
  local dut="$1" why="$2"
  {
    echo "error: $dut: $why"
    echo "--- last lines of $RUN/dut.log:"
    tail -n 25 "$RUN/dut.log" 2>/dev/null || true
  } >&2
  exit 1
}

# Waits up to $UP_TIMEOUT seconds until "${1}_up" succeeds, while PID $2 lives.
bench_wait_dut_up() {
  local dut="$1" pid="$2"
  local deadline=$((SECONDS + UP_TIMEOUT))
  until "${dut}_up" 2>/dev/null; do
    bench_alive "$pid" || bench_dut_failed "$dut" "did not come up: it exited during start-up"
    [ "$SECONDS" -lt "$deadline" ] || bench_dut_failed "$dut" "did not come up within ${UP_TIMEOUT} s"
    sleep 0.2
  done
}

# At exit: removes the run directory $WORK after a clean run (exit status $1)
# unless $KEEP_LOGS is 1; otherwise says where the logs are.
bench_remove_work() {
  [ -n "$WORK" ] || return 0
  if [ "$1" -eq 0 ] && [ "$KEEP_LOGS" -eq 0 ]; then
    rm -rf "$WORK"
  else
    bench_log "logs kept in $WORK"
  fi
}

# CPU accounting over a window, for benchmarks whose own processes fill the
# CPUs: how much of all CPUs processes that are not ours used.
#   bench_cpu_window_begin PID...   # PIDs: our processes that outlive the window
#   ... run ...                     # children reaped in this shell count as ours
#   bench_cpu_window_end            # sets BENCH_OTHER_SHARE and BENCH_OUR_SHARE
# Ours: the given live processes, every child this shell reaped during the
# window (with the descendants they reaped: /proc/$$/stat cutime + cstime),
# and the ksoftirqd threads, which carry veth traffic when softirqs pile up.
# Task time only (user + nice + system), as in bench/allreduce.sh.
BENCH_OTHER_SHARE=0
BENCH_OUR_SHARE=0
BENCH_CPU_WINDOW=()  # t0, all-CPU ticks, reaped ticks, live ticks, then the live pids
bench_reaped_ticks() {
  local rest
  rest=$(cat "/proc/$$/stat")
  rest="${rest##*) }"
  awk '{ print $14 + $15 }' <<<"$rest"
}
bench_task_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4; exit }' /proc/stat; }
bench_cpu_window_begin() {
  local pids
  read -r -a pids <<<"$* $(pgrep -x 'ksoftirqd/[0-9]+' | paste -sd' ')"
  BENCH_CPU_WINDOW=("$(bench_now)" "$(bench_task_ticks)" "$(bench_reaped_ticks)"
    "$(bench_cpu_ticks "${pids[@]}")" "${pids[@]}")
}
bench_cpu_window_end() {
  local t1 sys1 reaped1 live1
  sys1=$(bench_task_ticks)
  t1=$(bench_now)
  reaped1=$(bench_reaped_ticks)
  live1=$(bench_cpu_ticks "${BENCH_CPU_WINDOW[@]:4}")
  read -r BENCH_OTHER_SHARE BENCH_OUR_SHARE <<<"$(awk -v t0="${BENCH_CPU_WINDOW[0]}" -v t1="$t1" \
    -v s0="${BENCH_CPU_WINDOW[1]}" -v s1="$sys1" -v r0="${BENCH_CPU_WINDOW[2]}" -v r1="$reaped1" \
    -v l0="${BENCH_CPU_WINDOW[3]}" -v l1="$live1" -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" 'BEGIN {
      wall = n * (t1 - t0) * hz; ours = (r1 - r0) + (l1 - l0); other = (s1 - s0) - ours
      if (other < 0) other = 0
      if (wall <= 0) wall = 1
      printf "%.3f %.3f", other / wall, ours / wall }')"
}

# bench_plot KIND RESULTS... --out PNG: draws the benchmark's results with
# bench/plot.py (Debian's python3 and python3-matplotlib: scripts/install-deps.sh
# --bench) and says where the PNG went. Without matplotlib, or when the plot
# fails, it says so and returns 0: the figures are in the results already.
BENCH_PLOT_PYTHON=/usr/bin/python3  # pyenv's or a venv's python3 on PATH may not see Debian's packages
bench_plot() {
  local png
  if ! "$BENCH_PLOT_PYTHON" -c 'import matplotlib' 2>/dev/null; then
    bench_log "no plot: $BENCH_PLOT_PYTHON has no matplotlib (scripts/install-deps.sh --bench installs python3-matplotlib)"
    return 0
  fi
  if png=$("$BENCH_PLOT_PYTHON" "$BENCH/plot.py" "$@"); then
    bench_log "plot written to $png"
  else
    bench_log "warning: bench/plot.py $1 failed (see above); the results stand without a plot"
  fi
}
