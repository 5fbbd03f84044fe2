#!/usr/bin/env bash
# Without replication a shard node's death loses its keys, and the store must say so rather than
# pose as empty. Three //tools:node --kv processes form a cluster; a shell (//tools:kvsh, a late
# node) puts 30 keys and keeps running.
#  - Node 2 is paused (SIGSTOP) past its lease while the shell reads every key: the GET whose
#    READ is in flight to node 2 ends with Unavailable when the CM evicts node 2 ("node 2 left
#    the cluster ... abandoned"), not with DeadlineExceeded at the 10 s operation timeout, and
#    every other key of node 0 and 1 is read.
# Node 2 is then killed (SIGKILL) and started again: it joins the running cluster and formats an
# empty shard. Then
#  - the shell that cached node 2's old shard description drops it (the membership changed) and
#    gets DataLoss for node 2's keys (not Unavailable forever);
#  - a new shell gets DataLoss for node 2's keys, for GET and PUT alike (not NotFound, which
#    would deny PUTs that returned OK);
#  - both still read every other key.
# On tcp;ofi_rxm (a process killed inside shm's queues can wedge them: tests/txn_fault_test.sh).
source "$(dirname "$0")/lib.sh"
NODE=$(bin node) || exit 1
KVSH=$(bin kvsh) || exit 1
provider=${FARM_TEST_RESTART_PROVIDER:-tcp;ofi_rxm}
host=${FARM_TEST_HOST:-127.0.0.1}
keys=30

read -r P0 P1 P2 P3 P4 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(5)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cfg="$TMP/restart.textproto"
cat >"$cfg" <<CFG
provider: "$provider"
region_size: 8388608
region_count: 2
join_timeout_s: 60
lease_ms: 5000
lock_memory: false
node { id: 0 host: "$host" control_port: $P0 }
node { id: 1 host: "$host" control_port: $P1 }
node { id: 2 host: "$host" control_port: $P2 }
node { id: 3 host: "$host" control_port: $P3 late: true }
node { id: 4 host: "$host" control_port: $P4 late: true }
CFG

declare -a pids
shell=
cleanup() {
  exec 9>&- 2>/dev/null
  for p in "${pids[@]}" $shell; do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

start_node() {  # ID RUN
  "$NODE" --config="$cfg" --node_id="$1" --kv --kv_buckets=256 --log_level=info \
    >"$TMP/n$1.$2.out" 2>"$TMP/n$1.$2.err" 9>&- &  # not the shell's input fifo (its EOF)
  pids[$1]=$!
}
wait_for() {  # FILE PATTERN: waits up to 60 s for PATTERN in FILE
  for _ in $(seq 600); do
    grep -qE -- "$2" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "no /$2/ in $1:"$'\n'"$(cat "$1")"
}

for i in 0 1 2; do start_node "$i" 1; done
for i in 0 1 2; do wait_for "$TMP/n$i.1.out" '^READY'; done
echo "ok: 3 shard nodes"

# The long-lived shell: commands through a fifo, replies in files.
mkfifo "$TMP/in"
timeout 300 "$KVSH" --config="$cfg" --node_id=3 <"$TMP/in" >"$TMP/shell.out" 2>"$TMP/shell.err" &
shell=$!
exec 9>"$TMP/in"
for i in $(seq 0 $((keys - 1))); do echo "put k$i v$i" >&9; done
for i in $(seq 0 $((keys - 1))); do echo "get k$i" >&9; done
for _ in $(seq 600); do
  [ "$(grep -c '^"v' "$TMP/shell.out")" = "$keys" ] && break
  sleep 0.1
done
[ "$(grep -c '^OK$' "$TMP/shell.out")" = "$keys" ] || fail "puts: $(cat "$TMP/shell.out" "$TMP/shell.err")"
[ "$(grep -c '^"v' "$TMP/shell.out")" = "$keys" ] || fail "gets: $(cat "$TMP/shell.out" "$TMP/shell.err")"
echo "ok: $keys keys put and read back"

# Node 2 paused past its 5 s lease while the shell reads every key (10 s operation timeout).
kill -STOP "${pids[2]}"
# kill returns before every thread stopped (one takes the signal and stops the rest when it runs).
all_stopped() {  # PID: every thread's state (after the last ')' of its stat line) is T
  local t st
  for t in /proc/"$1"/task/*/stat; do
    st=$(sed -E 's/.*\) (.).*/\1/' "$t" 2>/dev/null) || continue
    [ "$st" = T ] || return 1
  done
}
for _ in $(seq 3000); do all_stopped "${pids[2]}" && break; sleep 0.01; done
all_stopped "${pids[2]}" || fail "node 2 did not stop within 30 s"
: >"$TMP/shell.out"
: >"$TMP/shell.err"
for i in $(seq 0 $((keys - 1))); do echo "get k$i" >&9; done
answers() { echo $(($(grep -c '^"v' "$TMP/shell.out") + $(grep -c '(error)' "$TMP/shell.err"))); }
for _ in $(seq 600); do
  [ "$(answers)" = "$keys" ] && break
  sleep 0.1
done
values=$(grep -c '^"v' "$TMP/shell.out")
errors=$(grep -c '(error)' "$TMP/shell.err")
[ "$((values + errors))" = "$keys" ] ||
  fail "$values values and $errors errors for $keys GETs with node 2 paused:"$'\n'"$(cat \
    "$TMP/shell.out" "$TMP/shell.err")"
[ "$errors" -gt 0 ] || fail "no GET of node 2's keys failed while it was paused and evicted"
! grep '(error)' "$TMP/shell.err" | grep -v UNAVAILABLE ||
  fail "errors other than Unavailable with node 2 paused and evicted:"$'\n'"$(cat "$TMP/shell.err")"
grep -q "UNAVAILABLE.*node 2 left the cluster.*abandoned" "$TMP/shell.err" ||
  fail "the GET in flight to node 2 did not end at its eviction:"$'\n'"$(cat "$TMP/shell.err")"
wait_for "$TMP/n0.1.err" "CM: node 2 (left|is no longer a member)"
echo "ok: node 2 paused past its lease: the GET in flight to it ended at its eviction;" \
  "$values keys read, $errors Unavailable"

kill -KILL "${pids[2]}"
wait "${pids[2]}" 2>/dev/null
start_node 2 2
wait_for "$TMP/n2.2.out" '^READY'
grep -q "kv: node 2 joined a running cluster" "$TMP/n2.2.err" ||
  fail "the restarted node does not say its shard lost its keys: $(cat "$TMP/n2.2.err")"
echo "ok: node 2 killed and started again"

# check_reads OUT ERR: every key is its value or DataLoss (node 2's), never (nil) nor another
# error, and some are DataLoss. Sets $lost to the number of DataLoss answers.
check_reads() {
  local values nil other
  values=$(grep -c '^"v' "$1")
  nil=$(grep -c '^(nil)' "$1")
  lost=$(grep -c 'DATA_LOSS kv: node 2 restarted and lost the keys' "$2")
  other=$(grep '(error)' "$2" | grep -vc 'DATA_LOSS kv: node 2 restarted')
  [ "$nil" = 0 ] || fail "keys whose PUT returned OK read as absent:"$'\n'"$(cat "$1" "$2")"
  [ "$other" = 0 ] || fail "errors other than DataLoss:"$'\n'"$(cat "$2")"
  [ "$((values + lost))" = "$keys" ] || fail "$values values and $lost DataLoss for $keys keys:"$'\n'"$(cat "$1" "$2")"
  [ "$lost" -gt 0 ] || fail "no key of node 2 (expected about a third of $keys)"
}

# The shell that cached node 2's old shard: its node may apply the new membership a moment after
# node 2 is READY, so it asks again (a bounded number of times) while it still gets Unavailable.
for attempt in $(seq 20); do
  : >"$TMP/shell.out"
  : >"$TMP/shell.err"
  for i in $(seq 0 $((keys - 1))); do echo "get k$i" >&9; done
  echo "put done-$attempt x" >&9
  wait_for "$TMP/shell.out" "^OK$"
  grep -q "UNAVAILABLE" "$TMP/shell.err" || break
  sleep 1
done
check_reads "$TMP/shell.out" "$TMP/shell.err"
echo "ok: the running shell reads every other key and gets DataLoss for node 2's $lost"

for i in $(seq 0 $((keys - 1))); do echo "get k$i"; done |
  timeout 120 "$KVSH" --config="$cfg" --node_id=4 >"$TMP/fresh.out" 2>"$TMP/fresh.err"
rc=$?
[ "$rc" = 1 ] || fail "a new shell exited with $rc, not 1 (errors):"$'\n'"$(cat "$TMP/fresh.err")"
check_reads "$TMP/fresh.out" "$TMP/fresh.err"
echo "ok: a new shell reads every other key and gets DataLoss for node 2's $lost"
# A PUT of one of node 2's keys: DataLoss too (input line N is "get k<N-1>").
n=$(grep -m1 'DATA_LOSS' "$TMP/fresh.err" | sed -E 's/^line ([0-9]+):.*/\1/')
lost_key="k$((n - 1))"
timeout 120 "$KVSH" --config="$cfg" --node_id=4 -c "put $lost_key again" >"$TMP/put.out" 2>"$TMP/put.err"
grep -q "DATA_LOSS kv: node 2 restarted and lost the keys" "$TMP/put.err" ||
  fail "PUT of $lost_key: $(cat "$TMP/put.out" "$TMP/put.err")"
echo "ok: a PUT of $lost_key gets DataLoss"

wait_exit() {  # PID NAME LOG: waits up to 30 s for PID to exit
  for _ in $(seq 300); do
    kill -0 "$1" 2>/dev/null || { wait "$1"; return 0; }
    sleep 0.1
  done
  fail "$2 did not exit within 30 s:"$'\n'"$(tail -20 "$3")"
}
exec 9>&-
wait_exit "$shell" "the running shell, at the end of its input," "$TMP/shell.err"
shell=
for i in 0 1 2; do kill -TERM "${pids[$i]}"; done
wait_exit "${pids[0]}" "node 0 (SIGTERM)" "$TMP/n0.1.err"
wait_exit "${pids[1]}" "node 1 (SIGTERM)" "$TMP/n1.1.err"
wait_exit "${pids[2]}" "node 2, restarted (SIGTERM)" "$TMP/n2.2.err"
trap - EXIT
expect_no_process "$cfg"
echo "PASS"
