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
source "$(dirname "$0")/kv_nodes.sh"
keys=30
cfg="$TMP/restart.textproto"
# f: 0 (no backups): a dead node's shard is lost, and its restart finds it so (with f = 1, the
# default on 3 processes, kv_failover_test).
kv_config "$cfg" "${FARM_TEST_RESTART_PROVIDER:-tcp;ofi_rxm}" "lease_ms: 5000
f: 0"

start_with_keys

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

# The shell that cached node 2's old shard (it asks again while its node still gets Unavailable:
# it may apply the new membership a moment after node 2 is READY).
reread
check_reads "$TMP/shell.out" "$TMP/shell.err"
echo "ok: the running shell reads every other key and gets DataLoss for node 2's $lost"

for i in $(seq 0 $((keys - 1))); do echo "get k$i"; done |
  timeout 120 "$KVSH" --config="$cfg" --node_id=4 >"$TMP/fresh.out" 2>"$TMP/fresh.err"
rc=$?
[ "$rc" = 1 ] || fail "a new shell exited with $rc, not 1 (errors):"$'\n'"$(cat "$TMP/fresh.err")"
check_reads "$TMP/fresh.out" "$TMP/fresh.err"
echo "ok: a new shell reads every other key and gets DataLoss for node 2's $lost"
# A PUT of one of node 2's keys: DataLoss too (input line N is "get k<N-1>").
n=$(grep -m1 'DATA_LOSS' "$TMP/fresh.err" | sed -E 's/.* \(line ([0-9]+)\)$/\1/')
lost_key="k$((n - 1))"
timeout 120 "$KVSH" --config="$cfg" --node_id=4 -c "put $lost_key again" >"$TMP/put.out" 2>"$TMP/put.err"
grep -q "DATA_LOSS kv: node 2 restarted and lost the keys" "$TMP/put.err" ||
  fail "PUT of $lost_key: $(cat "$TMP/put.out" "$TMP/put.err")"
echo "ok: a PUT of $lost_key gets DataLoss"

stop_all 2
echo "PASS"
