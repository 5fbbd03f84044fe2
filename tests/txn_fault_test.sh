#!/usr/bin/env bash
# A node dies in the middle of a commit (tests/txn_fault_app.cc, killed at a sync point of the
# commit protocol): 3 real node processes per provider, launched by tools/cluster.
#  - participant: the owner of one written object exits right after locking it. The coordinator's
#    commit fails with a clear error (no hang), the other owner's lock is released, the object is
#    unchanged and writable.
#  - coordinator-lock / coordinator-validate: the coordinator exits holding locks on two other
#    nodes (after LOCK, or after validation, before COMMIT-PRIMARY). Once membership says it is
#    gone, the owners release its locks: both objects are unchanged and a new transaction writes
#    them.
#  - coordinator-commit: the coordinator's COMMIT-PRIMARY reaches one owner (the other's is
#    dropped) and it exits: the owners settle the transaction among themselves and both commit.
#  - coordinator-lease: the coordinator is stopped before its decision until its lease expired,
#    and resumed while the CM holds its eviction back (it is still a member everywhere): a node
#    whose lease ended does not decide, so both objects are unchanged; it ends evicted (status 3).
# Each run must report exactly the dying node as failed (status 17) and leave no process behind.
# Without replication (--f=0; with backups, the same deaths are recovery's: replication_test,
# //tools:chaos).
#
# Not on shm. libfabric 1.17's shm provider guards each process's command queue with a spinlock
# in shared memory that its peers take to post to it; a process killed while one of its threads
# (its poller, or any thread driving progress) holds a peer's lock leaves that peer's queue
# locked for good, and every later WRITE to that peer stalls. Seen in about half of the runs on
# shm, in every scenario: the survivors' WRITEs to one node never complete while that node keeps
# polling (gdb: its poller sleeping normally between progress calls, the sender inside
# fi_cq_read); never on tcp;ofi_rxm. shm is a same-host test transport: killing processes is
# tested on tcp;ofi_rxm here and on verbs in the SoftiWARP lane.
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
APP=${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-farm}/tests/txn_fault_app
[ -x "$APP" ] || APP="$_root/bazel-bin/tests/txn_fault_app"

IFS=' ' read -r -a providers <<<"${FARM_TEST_PROVIDERS:-tcp;ofi_rxm}"
host=${FARM_TEST_HOST:-127.0.0.1}

run() {  # scenario provider dying_node [exit status] [cluster flags...]
  local scenario=$1 provider=$2 dying=$3 status=${4:-17}
  shift 4 2>/dev/null || shift $#
  echo "== $scenario, provider $provider: node $dying dies mid-commit"
  TXN_FAULT=$scenario timeout 120 "$CLUSTER" --nodes=3 --provider="$provider" --host="$host" \
    --node_binary="$APP" --lock_memory=false --log_level=warn --f=0 "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  cat "$TMP/out"
  [ "$rc" != 124 ] || { cat "$TMP/err"; fail "$scenario timed out (a hang)"; }
  grep -q "^application txn_fault: 2/3 nodes succeeded$" "$TMP/out" ||
    { cat "$TMP/err"; fail "$scenario: expected exactly one failed node"; }
  grep -qE "node $dying: .*exited with status $status" "$TMP/err" ||
    { cat "$TMP/err"; fail "$scenario: node $dying did not end with status $status"; }
  grep -qE "\[node $dying\] (dying|stopping) at " "$TMP/out" || fail "$scenario: no 'dying at' line"
  if grep -q "RESULT .*FAILED" "$TMP/out"; then fail "$scenario: a check failed"; fi
  grep -q "\[node 0\] RESULT locks released: a new transaction committed" "$TMP/out" ||
    fail "$scenario: the survivors could not write the objects again"
  expect_no_process "$APP --config"
}

for provider in "${providers[@]}"; do
  if [ "$provider" = shm ]; then
    echo "== shm: not run (a killed process can wedge shm's shared queues; see above)"
    continue
  fi
  run participant "$provider" 2
  grep -q "\[node 0\] RESULT commit failed with a clear error: ok" "$TMP/out" ||
    fail "participant: the commit did not fail clearly"
  run coordinator-lock "$provider" 1
  run coordinator-validate "$provider" 1
  # The decision reached node 0 only: node 2 settles it with node 0 and commits too.
  run coordinator-commit "$provider" 1
  grep -q "\[node 0\] RESULT x is 1 (1): ok" "$TMP/out" &&
    grep -q "\[node 0\] RESULT y is 2 (2): ok" "$TMP/out" ||
    fail "coordinator-commit: the transaction was not applied at both owners"
  # The same with the coordinator alive: stopped after node 0's acknowledgement, evicted when its
  # lease expires (the default 3 s), resumed after the owners settled; it ends as an evicted
  # node does (status 3).
  run coordinator-evicted "$provider" 1 3
  grep -q "\[node 0\] RESULT x is 1 (1): ok" "$TMP/out" &&
    grep -q "\[node 0\] RESULT y is 2 (2): ok" "$TMP/out" &&
    grep -q "\[node 0\] RESULT the resumed coordinator changed nothing: ok" "$TMP/out" ||
    fail "coordinator-evicted: the settlement or the fence failed"
  run coordinator-lease "$provider" 1 3
  grep -q "\[node 1\] commit after resuming: UNAVAILABLE: .* aborted before its decision: .*lease" \
    "$TMP/out" || fail "coordinator-lease: the commit did not fail naming the lease"
  grep -q "\[node 0\] RESULT x is 100 (100): ok" "$TMP/out" &&
    grep -q "\[node 0\] RESULT y is 200 (200): ok" "$TMP/out" ||
    fail "coordinator-lease: a coordinator whose lease had expired decided"
done
echo "PASS"
