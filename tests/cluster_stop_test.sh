#!/usr/bin/env bash
# Stopping a whole cluster is not a failure: //tools:cluster, holding a replicated cluster
# (--f=1) and told to stop (SIGTERM, as ./run.sh and a Ctrl-C do), tells every node that the
# cluster ends. The members leave with their regions: the configuration manager promotes no
# backup, reports no region or backup lost, evicts nobody, and its node leaves last; every node
# exits on its own (no SIGTERM or SIGKILL from the supervisor) and none is left running.
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
NODE=$(bin node) || exit 1

for provider in shm "tcp;ofi_rxm"; do
  echo "== provider $provider"
  # Files of their own: the background start truncates them only once it runs, and the wait below
  # must not find the previous provider's "cluster running" meanwhile.
  out="$TMP/stop-${provider%%;*}.out" err="$TMP/stop-${provider%%;*}.err"
  rm -f "$out" "$err"
  # Not locked in RAM: three regions of backup copies per node exceed the sandbox's 8 MiB limit.
  "$CLUSTER" --nodes=3 --f=1 --provider="$provider" --lock_memory=false --self_check=false \
    --node_binary="$NODE" >"$out" 2>"$err" &
  pid=$!
  trap 'kill -KILL $pid 2>/dev/null' EXIT
  for _ in $(seq 600); do
    grep -q "cluster running" "$err" && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  grep -q "cluster running" "$err" || fail "the cluster did not start:"$'\n'"$(cat "$err")"
  kill -TERM "$pid"
  # The CM's node waits for the others at most a lease (10 s by default) before it leaves.
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "the cluster still runs 60 s after SIGTERM"
  wait "$pid"
  rc=$?
  trap - EXIT
  [ "$rc" = 0 ] || fail "the cluster exited with $rc after SIGTERM:"$'\n'"$(cat "$err")"
  for n in 0 1 2; do
    grep -q "node$n info: node $n: the whole cluster stops, leaving" "$err" ||
      fail "node $n was not told that the cluster stops:"$'\n'"$(cat "$err")"
    grep -q "node$n info: node $n stopped" "$err" ||
      fail "node $n did not stop on its own:"$'\n'"$(cat "$err")"
  done
  grep -q "CM: the cluster ends" "$err" || fail "the CM did not see the cluster end:"$'\n'"$(cat "$err")"
  if grep -E "lost|no longer a member|evicted|did not stop|SIGKILL|SIGTERM| (warn|error|critical): " \
    "$err"; then
    fail "stopping the cluster looked like a failure (above):"$'\n'"$(cat "$err")"
  fi
  echo "ok: 3 nodes left with their regions, nothing promoted or lost"
  expect_no_process "$NODE --config"
done
echo "PASS"
