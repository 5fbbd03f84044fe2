#!/usr/bin/env bash
# The node tool is fail-stop: a node paused (SIGSTOP) for longer than its lease is evicted by the
# configuration manager while it is stopped, and on resume exits with status 3 and
# "node 1 was evicted from the cluster: its lease expired". The configuration manager's node
# carries on and still stops cleanly.
source "$(dirname "$0")/lib.sh"
NODE=$(bin node) || exit 1

read -r P0 P1 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
# A 3 s lease: with 1 s, node 0 (the CM's own) lost its lease twice in 12 runs on this 2-core
# machine loaded by two chaos runs beside the test.
cfg="$TMP/lease.textproto"
cat >"$cfg" <<CFG
provider: "shm"
region_size: 1048576
region_count: 1
lock_memory: false
lease_ms: 3000
node { id: 0 host: "127.0.0.1" control_port: $P0 }
node { id: 1 host: "127.0.0.1" control_port: $P1 }
CFG

"$NODE" --config="$cfg" --node_id=0 --log_level=warn >"$TMP/n0.out" 2>"$TMP/n0.err" &
pid0=$!
"$NODE" --config="$cfg" --node_id=1 --log_level=warn >"$TMP/n1.out" 2>"$TMP/n1.err" &
pid1=$!
cleanup() { kill -CONT "$pid1" 2>/dev/null; kill -KILL "$pid0" "$pid1" 2>/dev/null; }
trap cleanup EXIT

wait_for() {  # FILE PATTERN: waits up to 30 s for PATTERN in FILE
  for _ in $(seq 300); do
    grep -qE -- "$2" "$1" && return 0
    sleep 0.1
  done
  local err=${1%.out}.err  # the node's log, when waiting on its standard output
  fail "no /$2/ in $1:"$'\n'"$(cat "$1")"$'\n'"$([ "${1%.out}" != "$1" ] && tail -20 "$err")"
}
wait_for "$TMP/n0.out" '^READY'
wait_for "$TMP/n1.out" '^READY'
echo "ok: both nodes are members"

kill -STOP "$pid1"
wait_for "$TMP/n0.err" 'CM: node 1 is no longer a member: its lease expired'
echo "ok: the CM evicted the paused node 1"
kill -CONT "$pid1"
for _ in $(seq 300); do kill -0 "$pid1" 2>/dev/null || break; sleep 0.1; done
kill -0 "$pid1" 2>/dev/null && fail "node 1 still runs 30 s after its eviction"
wait "$pid1"
rc=$?
[ "$rc" = 3 ] || fail "the evicted node exited with $rc, not 3:"$'\n'"$(cat "$TMP/n1.err")"
grep -q "node 1 was evicted from the cluster: its lease expired" "$TMP/n1.err" ||
  fail "no eviction message from node 1:"$'\n'"$(cat "$TMP/n1.err")"
echo "ok: node 1 exited with 3: $(tail -n 1 "$TMP/n1.err")"

kill -0 "$pid0" 2>/dev/null ||
  fail "node 0 did not survive node 1's eviction:"$'\n'"$(tail -20 "$TMP/n0.err")"
kill -TERM "$pid0"
wait "$pid0"
rc=$?
[ "$rc" = 0 ] || fail "node 0 exited with $rc after SIGTERM:"$'\n'"$(cat "$TMP/n0.err")"
trap - EXIT
echo "PASS"
