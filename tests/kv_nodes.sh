# Helpers of the tests that run //tools:node --kv processes and a long-lived //tools:kvsh (a late
# node) against them. Source it after lib.sh; it defines:
#   kv_config FILE PROVIDER EXTRA   a configuration of 3 shard nodes (0-2) and 2 late nodes (3, 4)
#                   on free ports, 8 MiB regions, with EXTRA lines (e.g. "f: 1") added
#   start_node ID RUN   starts node ID (output in $TMP/nID.RUN.{out,err}), its pid in pids[ID]
#   wait_for FILE PATTERN   waits up to 60 s for PATTERN (grep -E) in FILE
#   start_shell     starts kvsh as node 3 reading $TMP/in (write commands to fd 9), output in
#                   $TMP/shell.{out,err}
#   wait_exit PID NAME LOG   waits up to 30 s for PID to exit
#   start_with_keys     starts nodes 0-2 and the shell, which puts $keys keys (k<i> = v<i>) and
#                   reads them back
#   reread          the shell reads every key again (then puts a marker key, to know it answered
#                   them all), up to 20 times a second apart while an answer is Unavailable (its
#                   node may apply a new membership a moment after the CM logged it)
#   stop_all RUN    ends the shell (EOF) and the three nodes (SIGTERM; node 2's log of run RUN),
#                   checks nothing is left
# The EXIT trap kills whatever is still running. Needs $NODE, $KVSH and $cfg.
declare -a pids
shell=
cleanup() {
  exec 9>&- 2>/dev/null
  for p in "${pids[@]}" $shell; do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

kv_config() {  # FILE PROVIDER EXTRA
  local P0 P1 P2 P3 P4 host=${FARM_TEST_HOST:-127.0.0.1}
  read -r P0 P1 P2 P3 P4 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(5)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
  cat >"$1" <<CFG
provider: "$2"
region_size: 8388608
region_count: 2
join_timeout_s: 60
lock_memory: false
$3
node { id: 0 host: "$host" control_port: $P0 failure_domain: "process 0" }
node { id: 1 host: "$host" control_port: $P1 failure_domain: "process 1" }
node { id: 2 host: "$host" control_port: $P2 failure_domain: "process 2" }
node { id: 3 host: "$host" control_port: $P3 late: true }
node { id: 4 host: "$host" control_port: $P4 late: true }
CFG
}

start_node() {  # ID RUN
  "$NODE" --config="$cfg" --node_id="$1" --kv --kv_buckets=256 --log_level=info \
    >"$TMP/n$1.$2.out" 2>"$TMP/n$1.$2.err" 9>&- &  # not the shell's input fifo (its EOF)
  pids[$1]=$!
}

wait_for() {  # FILE PATTERN
  for _ in $(seq 600); do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no /$2/ in $1:"$'\n'"$(cat "$1")"
}

start_shell() {
  mkfifo "$TMP/in"
  timeout 300 "$KVSH" --config="$cfg" --node_id=3 <"$TMP/in" >"$TMP/shell.out" \
    2>"$TMP/shell.err" &
  shell=$!
  exec 9>"$TMP/in"
}

start_with_keys() {
  for i in 0 1 2; do start_node "$i" 1; done
  for i in 0 1 2; do wait_for "$TMP/n$i.1.out" '^READY'; done
  echo "ok: 3 shard nodes"
  start_shell
  for i in $(seq 0 $((keys - 1))); do echo "put k$i v$i" >&9; done
  for i in $(seq 0 $((keys - 1))); do echo "get k$i" >&9; done
  for _ in $(seq 600); do
    [ "$(grep -c '^"v' "$TMP/shell.out")" = "$keys" ] && break
    sleep 0.1
  done
  [ "$(grep -c '^OK$' "$TMP/shell.out")" = "$keys" ] ||
    fail "puts: $(cat "$TMP/shell.out" "$TMP/shell.err")"
  [ "$(grep -c '^"v' "$TMP/shell.out")" = "$keys" ] ||
    fail "gets: $(cat "$TMP/shell.out" "$TMP/shell.err")"
  echo "ok: $keys keys put and read back"
}

reread() {
  local attempt
  for attempt in $(seq 20); do
    : >"$TMP/shell.out"
    : >"$TMP/shell.err"
    for i in $(seq 0 $((keys - 1))); do echo "get k$i" >&9; done
    echo "put done-$attempt x" >&9
    wait_for "$TMP/shell.out" "^OK$"
    grep -q "UNAVAILABLE" "$TMP/shell.err" || break
    sleep 1
  done
}

wait_exit() {  # PID NAME LOG
  for _ in $(seq 300); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; return 0; }
    sleep 0.1
  done
  fail "$2 did not exit within 30 s:"$'\n'"$(tail -20 "$3")"
}

stop_all() {  # RUN of node 2's log
  exec 9>&-
  wait_exit "$shell" "the running shell, at the end of its input," "$TMP/shell.err"
  shell=
  for i in 0 1 2; do kill -TERM "${pids[$i]}"; done
  wait_exit "${pids[0]}" "node 0 (SIGTERM)" "$TMP/n0.1.err"
  wait_exit "${pids[1]}" "node 1 (SIGTERM)" "$TMP/n1.1.err"
  wait_exit "${pids[2]}" "node 2 (SIGTERM)" "$TMP/n2.$1.err"
  trap - EXIT
  expect_no_process "$cfg"
}
