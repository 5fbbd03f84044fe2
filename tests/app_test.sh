#!/usr/bin/env bash
# Cluster applications as a user runs them: examples/hello (built with farm_app, linking only
# //:farm) launched by tools/cluster on 3 real node processes, for each provider. Every node must
# call every node and read every other node's greeting with a one-sided READ; the cluster must
# report 3/3 nodes succeeded, end without evicting a node or moving a region, and leave no
# process behind. A failing application makes the cluster fail with the node's error; bad flags
# to an application binary are refused.
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
HELLO=${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-farm}/examples/hello
[ -x "$HELLO" ] || HELLO="$_root/bazel-bin/examples/hello"
FAILING=${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-farm}/tests/failing_app
[ -x "$FAILING" ] || FAILING="$_root/bazel-bin/tests/failing_app"

IFS=' ' read -r -a providers <<<"${FARM_TEST_PROVIDERS:-shm tcp;ofi_rxm tcp}"
host=${FARM_TEST_HOST:-127.0.0.1}
n=3

# Three node processes are three failure domains: f = 1 by default, and a node's regions and
# backup copies with its rings pass the sandbox's 8 MiB locked-memory limit (no CAP_IPC_LOCK
# there); locking is not what this test is about (multinode_test locks).
for provider in "${providers[@]}"; do
  echo "== hello on $n nodes, provider $provider"
  timeout 120 "$CLUSTER" --nodes=$n --provider="$provider" --host="$host" \
    --node_binary="$HELLO" --log_level=warn --lock_memory=false >"$TMP/hello.out" \
    2>"$TMP/hello.err"
  rc=$?
  cat "$TMP/hello.out"
  [ "$rc" = 0 ] || { cat "$TMP/hello.err"; fail "hello exited $rc on $provider"; }
  grep -q "^application hello: $n/$n nodes succeeded$" "$TMP/hello.out" || fail "no success line"
  for from in $(seq 0 $((n - 1))); do
    for to in $(seq 0 $((n - 1))); do
      grep -qF "[node $from] node $from called node $to: \"node $to says hi to node $from" \
        "$TMP/hello.out" || fail "node $from did not call node $to"
      [ "$from" = "$to" ] && continue
      grep -qE "^\[node $from\] node $from read node $to's greeting with a one-sided READ: \"hello from node $to \(pid [0-9]+\)\"$" \
        "$TMP/hello.out" || fail "node $from did not read node $to's greeting"
    done
  done
  # A clean end: the CM's node leaves last, so nobody sees the CM go while leaving.
  if grep -q "was evicted" "$TMP/hello.out" "$TMP/hello.err"; then
    grep "was evicted" "$TMP/hello.out" "$TMP/hello.err"
    fail "a node was evicted at the application's end on $provider"
  fi
  # ... and the members leave with their regions: no backup is promoted, no region is lost.
  if grep -E "is now served by node|is lost|lost a backup" "$TMP/hello.out" "$TMP/hello.err"; then
    fail "the application's end moved or lost regions on $provider"
  fi
  expect_no_process "$HELLO --config"
done

echo "== a failing application"
expect_fail 1 "node 1: application failed: node 1 fails on purpose" -- \
  "$CLUSTER" --nodes=3 --provider="${providers[0]}" --host="$host" --node_binary="$FAILING" \
  --log_level=warn --lock_memory=false
expect_no_process "$FAILING --config"

echo "== bad flags to an application binary"
expect_fail 2 "--config is required" -- "$HELLO"
expect_fail 2 "cannot read|No such file|not found" -- "$HELLO" --config="$TMP/missing.textproto"
expect_fail 2 "unknown poll mode" -- "$HELLO" --config="$TMP/missing.textproto" --poll=sometimes
"$HELLO" --help >"$TMP/help.out" 2>&1
grep -q -- "--node_id" "$TMP/help.out" || fail "--help does not list --node_id"
echo "PASS"
