#!/usr/bin/env bash
# System test: what a local process, or a web page in a browser on the switch
# host, can do to a running aggswitch through its HTTP API and its config
# file (docs/security.md). Each check is a reproduction of an attack that
# used to stop the switch or drive its API:
#   - a body nested 5000 deep, to every route that takes a body, as JSON and
#     as a page's text/plain POST: refused, the switch up;
#   - requests without the token, with a wrong one, with another Host (DNS
#     rebinding), an Origin, or text/plain: refused and counted;
#   - 50 connections that send half a request and wait: /metrics answers;
#   - a number no double holds: 400, not 500;
#   - a kilobyte of YAML whose aliases expand node id ranges
#     without end, by --check-config and by SIGHUP: refused at once, the
#     switch's memory bounded;
#   - its HTTP port taken by another process: the test fails at start-up;
#   - an API beyond loopback without a token: refused at config check.
#
# Usage: security_api_test.sh AGGSWITCH AGGCTL
# Needs root (the switch's af_packet port). Everything is torn down on exit.
set -u
AGGSWITCH=$(realpath "$1")
AGGCTL=$(realpath "$2")
HERE=$(cd "$(dirname "$0")" && pwd)
source "$HERE/../lib/topology.sh"
# shellcheck source=tests/lib/check.sh
source "$HERE/../lib/check.sh"

WORK=$(mktemp -d /tmp/aggswitch-secapi.XXXXXX)
HTTP_PORT=19491
URL="http://127.0.0.1:$HTTP_PORT"
PREFIX="agg-secapi-$$"
TOKEN_FILE="$WORK/api.token"

topo_init sa
cleanup_all() { topo_cleanup; rm -rf "$WORK"; }
trap cleanup_all EXIT
topo_host h0 sa-p0
topo_addr h0 eth0 10.0.51.1/24

# write_config FILE HTTP_YAML [AGGREGATION_EXTRA]: a one-port switch.
write_config() {
  cat >"$1" <<EOF
eal:
  lcores: "0,1"
  main_lcore: 0
  memory_mb: 256
  file_prefix: $PREFIX
switch:
  addresses: [10.0.51.254/24]
ports:
  - {name: p0, devargs: "net_af_packet_sa0,iface=sa-p0", access: 10}
mempool: {mbufs: 4095}
http: $2
aggregation:
  address: 10.0.51.253
  jobs: [{id: 7, key: "0x5eed", members: 2}]
${3:-}
EOF
}
write_config "$WORK/switch.yaml" "{listen: \"127.0.0.1:$HTTP_PORT\", token_file: \"$TOKEN_FILE\"}"

# --- Start-up: a port another process holds fails the test at once.
port_taken() {
  python3 -c 'import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(30)' "$HTTP_PORT" &
  local holder=$! rc=0 start i
  topo_track_pid "$holder"
  for i in $(seq 1 50); do
    http_port_free "$HTTP_PORT" >/dev/null || break
    sleep 0.1
  done
  http_port_free "$HTTP_PORT" && { echo "the port looks free"; rc=1; }
  start=$(date +%s)
  "$AGGSWITCH" --config "$WORK/switch.yaml" >"$WORK/taken.log" 2>&1 &
  local pid=$!
  topo_track_pid "$pid"
  if wait_switch "$pid" "$URL" 20; then
    echo "wait_switch accepted a switch that cannot listen"
    rc=1
  fi
  [ $(($(date +%s) - start)) -lt 10 ] || { echo "it took $(($(date +%s) - start)) s to notice"; rc=1; }
  grep -q "cannot listen on 127.0.0.1:$HTTP_PORT" "$WORK/taken.log" || { cat "$WORK/taken.log"; rc=1; }
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  return $rc
}
check "an HTTP port taken by another process fails the test at start-up, not checks later" port_taken

check "an API beyond loopback without a token is refused at config check" bash -c "
  cfg='$WORK/open.yaml'
  sed 's|^http: .*|http: {listen: \"0.0.0.0:$HTTP_PORT\"}|' '$WORK/switch.yaml' >\"\$cfg\"
  out=\$('$AGGSWITCH' --config \"\$cfg\" --check-config 2>&1); rc=\$?
  echo \"\$out\"
  [ \$rc -eq 2 ] && echo \"\$out\" | grep -q 'http.listen: expected a loopback address'"

if ! run_switch "$AGGSWITCH" "$WORK/switch.yaml" "$HTTP_PORT" "$WORK/aggswitch.log"; then
  fail "aggswitch did not come up"; finish; exit 1
fi
check "the token file was created, readable by its owner only" \
  bash -c "[ \"\$(stat -c %a '$TOKEN_FILE')\" = 600 ] && [ \$(wc -c <'$TOKEN_FILE') -ge 33 ]"
TOKEN=$(cat "$TOKEN_FILE")

# status METHOD PATH [CURL ARGS...]: the HTTP status of one request.
status() {
  local method="$1" path="$2"
  shift 2
  curl -s -o "$WORK/body" -w '%{http_code}' -m 5 -X "$method" "$@" "$URL$path"
}
# expect_status CODE METHOD PATH [CURL ARGS...]
expect_status() {
  local want="$1" got
  shift
  got=$(status "$@")
  echo "$* -> $got: $(head -c 300 "$WORK/body")"
  [ "$got" = "$want" ]
}
alive() { kill -0 "$SWITCH_PID" && curl -fsS -m 2 -o /dev/null "$URL/metrics"; }
auth=(-H "Authorization: Bearer $TOKEN")
json=(-H "Content-Type: application/json")

# --- Nested bodies: 5000 levels in 10 KB, to every route that reads a body.
python3 -c 'import sys
for path, key in (("jobs", "id"), ("tan", "candidates"), ("stragglers", "top")):
    open(sys.argv[1] + "/deep-" + path, "w").write("{\"%s\":%s%s}" % (key, "[" * 5000, "]" * 5000))' "$WORK"
nested() {
  local rc=0 route
  for route in "/api/v1/jobs:deep-jobs" "/api/v1/jobs/7/tan:deep-tan" "/api/v1/jobs/7/stragglers:deep-stragglers"; do
    expect_status 400 POST "${route%%:*}" "${auth[@]}" "${json[@]}" --data-binary "@$WORK/${route##*:}" || rc=1
    grep -q "more than 16 levels deep" "$WORK/body" || rc=1
    # A page's cross-origin POST: text/plain, no token.
    expect_status 415 POST "${route%%:*}" -H "Content-Type: text/plain" --data-binary "@$WORK/${route##*:}" || rc=1
  done
  alive || rc=1
  return $rc
}
check "bodies nested 5000 deep, as JSON and as text/plain, to /jobs, /tan and /stragglers: refused, the switch up" nested

check "a number no double holds is 400, not 500" \
  expect_status 400 POST /api/v1/jobs "${auth[@]}" "${json[@]}" --data '{"id": 1e999, "key": 1, "members": 2}'

# --- Who may change what.
access() {
  local rc=0 body='{"id": 9, "key": "0x99", "members": 2}'
  expect_status 401 POST /api/v1/jobs "${json[@]}" --data "$body" || rc=1
  expect_status 401 POST /api/v1/jobs -H "Authorization: Bearer not-the-token-0000000000" "${json[@]}" --data "$body" || rc=1
  expect_status 401 DELETE /api/v1/jobs/7 || rc=1
  # DNS rebinding: a page whose name now resolves to 127.0.0.1 sends its own name.
  expect_status 403 GET /api/v1/jobs -H "Host: attacker.example:$HTTP_PORT" || rc=1
  expect_status 403 POST /api/v1/jobs -H "Host: attacker.example:$HTTP_PORT" "${auth[@]}" "${json[@]}" --data "$body" || rc=1
  expect_status 403 POST /api/v1/jobs "${auth[@]}" "${json[@]}" -H "Origin: http://attacker.example" --data "$body" || rc=1
  expect_status 415 POST /api/v1/jobs "${auth[@]}" -H "Content-Type: text/plain" --data "$body" || rc=1
  "$AGGCTL" -s "127.0.0.1:$HTTP_PORT" jobs show 9 >/dev/null 2>&1 && { echo "job 9 was added"; rc=1; }
  # The operator's aggctl with the token: added, and removed.
  "$AGGCTL" -s "127.0.0.1:$HTTP_PORT" --token-file "$TOKEN_FILE" jobs add --id 9 --key 0x99 --members 2 || rc=1
  "$AGGCTL" -s "127.0.0.1:$HTTP_PORT" --token-file "$TOKEN_FILE" jobs rm 9 || rc=1
  "$AGGCTL" -s "127.0.0.1:$HTTP_PORT" jobs add --id 9 --key 0x99 --members 2 2>&1 | tee "$WORK/aggctl.err"
  grep -q -- "--token-file or AGGCTL_TOKEN" "$WORK/aggctl.err" || rc=1
  return $rc
}
check "changes need the token, JSON, this switch's Host and no Origin; reads are open" access
refused_count() {
  curl -fsS -m 2 "$URL/metrics" | awk -v r="reason=\"$1\"" '$1 ~ /^aggswitch_http_requests_refused_total/ && index($1, r) { print $2 }'
}
counted() {
  local rc=0 reason n
  for reason in no_token bad_token host origin content_type; do
    n=$(refused_count "$reason")
    echo "refused $reason: ${n:-none}"
    [ -n "$n" ] && [ "$n" -ge 1 ] || rc=1
  done
  return $rc
}
check "  ... every refusal counted by its reason (aggswitch_http_requests_refused_total)" counted

# --- 50 slow clients hold a connection each; the API still answers.
slow_clients() {
  python3 -c 'import socket, sys, time
conns = []
for _ in range(50):
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    c.send(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    conns.append(c)
time.sleep(float(sys.argv[2]))' "$HTTP_PORT" 8 &
  local holder=$! rc=0 i start ms
  sleep 1
  for i in $(seq 1 10); do
    start=$(date +%s%N)
    curl -fsS -m 2 -o /dev/null "$URL/metrics" || { echo "scrape $i failed"; rc=1; }
    ms=$((($(date +%s%N) - start) / 1000000))
    echo "scrape $i: ${ms} ms"
    sleep 0.5
  done
  wait "$holder"
  return $rc
}
check "50 slow connections: /metrics answers every scrape within 2 s" slow_clients

# --- The config loader: aliases that multiply node id ranges.
cat >"$WORK/bomb.yaml" <<'EOF'
ports: [{name: p0, devargs: d}]
aggregation:
  jobs:
  - {id: 1, key: 1, switches: [{node: 65534, covers: &c ["0-65533"]}]}
  - {id: 2, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 3, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 4, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 5, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 6, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 7, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 8, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 9, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 10, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 11, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 12, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 13, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 14, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 15, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 16, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 17, key: 1, switches: [{node: 65534, covers: *c}]}
  - {id: 18, key: 1, switches: [{node: 65534, covers: *c}]}
EOF
bomb_check() {
  local out rc
  # The peak resident memory of the check, from its rusage.
  out=$(python3 -c 'import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print(p.stdout)
print("maxrss_kb", resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
sys.exit(p.returncode)' "$AGGSWITCH" --config "$WORK/bomb.yaml" --check-config)
  rc=$?
  echo "$out" | tail -4
  [ "$rc" -eq 2 ] || return 1
  echo "$out" | grep -q "expected at most 1048576 node ids in the whole file" || return 1
  [ "$(echo "$out" | awk '/maxrss_kb/ {print $2}')" -lt 400000 ]
}
check "$(wc -c <"$WORK/bomb.yaml")-byte alias bomb: --check-config names the bound, under 400 MB" bomb_check
rss() { curl -fsS -m 2 "$URL/metrics" | awk '$1 == "process_resident_memory_bytes" {print $2}'; }
sighup_bomb() {
  local before after start ms rc=0
  before=$(rss)
  cp "$WORK/switch.yaml" "$WORK/switch.yaml.good"
  cp "$WORK/bomb.yaml" "$WORK/switch.yaml"
  start=$(date +%s%N)
  kill -HUP "$SWITCH_PID"
  sleep 1
  curl -fsS -m 2 -o /dev/null "$URL/metrics" || rc=1
  ms=$((($(date +%s%N) - start) / 1000000))
  after=$(rss)
  cp "$WORK/switch.yaml.good" "$WORK/switch.yaml"
  echo "RSS before ${before} bytes, after ${after} bytes; answered ${ms} ms after the SIGHUP"
  grep -q "reload rejected" "$WORK/aggswitch.log" || rc=1
  [ $((after - before)) -lt $((64 << 20)) ] || rc=1
  [ "$ms" -lt 3000 ] || rc=1
  return $rc
}
check "SIGHUP with the alias bomb: rejected, the switch's RSS grows less than 64 MB, the API answers" sighup_bomb

# --- A switch without a token file: its API is read-only.
readonly_api() {
  local rc=0
  kill -TERM "$SWITCH_PID"; wait "$SWITCH_PID" 2>/dev/null
  write_config "$WORK/ro.yaml" "{listen: \"127.0.0.1:$HTTP_PORT\"}"
  run_switch "$AGGSWITCH" "$WORK/ro.yaml" "$HTTP_PORT" "$WORK/ro.log" || return 1
  expect_status 403 POST /api/v1/jobs "${auth[@]}" "${json[@]}" --data '{"id": 9, "key": 1, "members": 2}' || rc=1
  grep -q "read-only" "$WORK/body" || rc=1
  expect_status 200 GET /api/v1/jobs || rc=1
  return $rc
}
check "without http.token_file the API refuses every change, and still reads" readonly_api
check "promtool check metrics accepts /metrics" bash -c "curl -fsS '$URL/metrics' | promtool check metrics"
check "aggswitch is still running" kill -0 "$SWITCH_PID"

finish
