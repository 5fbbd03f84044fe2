#!/usr/bin/env bash
# With replication (f = 1) a shard node's death loses no key: its shard's bucket array lives on
# in the promoted backup of its region, under the same address, and every client keeps using the
# shard. Three //tools:node --kv processes (each its own failure domain) form a cluster; a shell
# (//tools:kvsh, a late node) puts 30 keys and keeps running. Then node 2 is killed (SIGKILL):
#  - the running shell reads every key (node 2's after its regions serve again: Unavailable
#    meanwhile, never another error, never (nil)), and writes one of node 2's keys;
#  - a new shell, which never saw node 2, learns node 2's shard from the other nodes and reads
#    every key, the rewritten one's new value included; `stats` counts node 2's shard too.
# Node 2 is then started again: it takes its previous shard back instead of posing with an empty
# one (it learns it from the others), so
#  - a new shell still reads every key.
# On tcp;ofi_rxm (a process killed inside shm's queues can wedge them: tests/txn_fault_test.sh).
source "$(dirname "$0")/lib.sh"
NODE=$(bin node) || exit 1
KVSH=$(bin kvsh) || exit 1
source "$(dirname "$0")/kv_nodes.sh"
keys=30
cfg="$TMP/failover.textproto"
kv_config "$cfg" "${FARM_TEST_RESTART_PROVIDER:-tcp;ofi_rxm}" "lease_ms: 3000
f: 1"

start_with_keys

kill -KILL "${pids[2]}"
wait "${pids[2]}" 2>/dev/null
wait_for "$TMP/n0.1.err" "CM: region\(s\) .* serve again"
echo "ok: node 2 killed; its regions serve again at their backups"

# The running shell reads every key again (while it gets Unavailable: recovery).
reread
[ ! -s "$TMP/shell.err" ] || fail "errors reading with node 2 gone:"$'\n'"$(cat "$TMP/shell.err")"
[ "$(grep -c '^"v' "$TMP/shell.out")" = "$keys" ] ||
  fail "not every key read with node 2 gone:"$'\n'"$(cat "$TMP/shell.out")"
echo "ok: the running shell reads all $keys keys, node 2's from its promoted backups"

# Every key rewritten (about a third are node 2's: no tool says which), read back by a new shell
# below.
: >"$TMP/shell.out"
for i in $(seq 0 $((keys - 1))); do echo "put k$i w$i" >&9; done
for _ in $(seq 600); do
  [ "$(grep -c '^OK$' "$TMP/shell.out")" = "$keys" ] && break
  sleep 0.1
done
[ "$(grep -c '^OK$' "$TMP/shell.out")" = "$keys" ] ||
  fail "puts with node 2 gone: $(cat "$TMP/shell.out" "$TMP/shell.err")"
echo "ok: the running shell rewrites all $keys keys"

fresh_reads() {  # NAME: a new shell reads every key; each must be w<i>
  for i in $(seq 0 $((keys - 1))); do echo "get k$i"; done |
    timeout 120 "$KVSH" --config="$cfg" --node_id=4 >"$TMP/$1.out" 2>"$TMP/$1.err"
  local rc=$?
  [ "$rc" = 0 ] || fail "$1: a new shell exited with $rc:"$'\n'"$(cat "$TMP/$1.err")"
  for i in $(seq 0 $((keys - 1))); do
    grep -qx "\"w$i\"" "$TMP/$1.out" || fail "$1: k$i is not w$i:"$'\n'"$(cat "$TMP/$1.out")"
  done
}
fresh_reads fresh
echo "ok: a new shell, which never saw node 2, reads all $keys new values"
timeout 120 "$KVSH" --config="$cfg" --node_id=4 -c "stats" >"$TMP/stats.out" 2>"$TMP/stats.err" ||
  fail "stats with node 2 gone: $(cat "$TMP/stats.out" "$TMP/stats.err")"
grep -qE "^ *2 " "$TMP/stats.out" || fail "stats has no row for node 2's shard:"$'\n'"$(cat "$TMP/stats.out")"
echo "ok: stats covers node 2's shard"

start_node 2 2
wait_for "$TMP/n2.2.out" '^READY'
wait_for "$TMP/n2.2.err" "kv: node 2 restarted and takes its previous shard back"
fresh_reads again
echo "ok: node 2 started again takes its previous shard back; a new shell reads all $keys keys"

stop_all 2
echo "PASS"
