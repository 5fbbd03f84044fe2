#!/usr/bin/env bash
# Durability as a user meets it: //tools:cluster --data_dir runs a replicated key-value cluster
# whose node processes keep their regions in files; kvsh writes keys; the cluster is stopped as a
# whole (SIGTERM, as ./run.sh and a Ctrl-C do: every node quiesces and writes its regions to disk);
# started again on the same directory it serves every key, takes new ones, and its late client
# slot still works. A cluster restarted with one node's directory gone does not form (it would
# lose that node's keys) and says why. Every node killed at once (kill -9) right after writes:
# started again, the cluster recovers every region from its backup's copy and journal and
# serves every acknowledged write.
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
NODE=$(bin node) || exit 1
KVSH=$(bin kvsh) || exit 1

provider=${FARM_TEST_PROVIDER:-shm}
data="$TMP/data"
cfg="$TMP/cluster.textproto"
rm -rf "$data" "$cfg"
pid=
trap '[ -n "$pid" ] && kill -KILL $pid 2>/dev/null' EXIT

# start_cluster LOG: starts the cluster on $data in the background (pid in $pid); waits until it
# runs, or returns 1 when it exits first.
start_cluster() {
  rm -f "$1.out" "$1.err"  # the wait below must find this run's lines only
  # Not locked in RAM: three nodes' regions and copies exceed the sandbox's locked-memory limit.
  "$CLUSTER" --nodes=3 --f=1 --provider="$provider" --lock_memory=false \
    --region_size=$((8 << 20)) --late_nodes=1 --write_config="$cfg" --data_dir="$data" \
    --node_binary="$NODE" -- --kv >"$1.out" 2>"$1.err" &
  pid=$!
  for _ in $(seq 1200); do
    grep -q "cluster running" "$1.err" && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  fail "the cluster neither ran nor exited in 120 s:"$'\n'"$(tail -20 "$1.err")"
}

stop_cluster() {  # LOG: SIGTERM, as a user stops it; every node must leave on its own
  kill -TERM "$pid"
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && fail "the cluster still runs 60 s after SIGTERM"
  wait "$pid"
  local rc=$?
  pid=
  [ "$rc" = 0 ] || fail "the cluster exited with $rc:"$'\n'"$(tail -20 "$1.err")"
  for n in 0 1 2; do
    grep -q "node $n: its regions are on disk in $data/node-$n" "$1.err" ||
      fail "node $n did not write its regions to disk:"$'\n'"$(grep "node$n" "$1.err" | tail -20)"
  done
  expect_no_process "$NODE --config"
}

expect_refused() {  # LOG REASON: the cluster must not form, and say REASON
  if start_cluster "$1"; then
    fail "the cluster formed (it should have said: $2)"
  fi
  wait "$pid"
  pid=
  grep -q -- "$2" "$1.err" || fail "no clear reason:"$'\n'"$(tail -20 "$1.err")"
  expect_no_process "$NODE --config"
}

shell() {  # SCRIPT: runs kvsh on the cluster's late slot; output in $TMP/kvsh.out
  timeout 60 "$KVSH" --config="$cfg" -c "$1" >"$TMP/kvsh.out" 2>"$TMP/kvsh.err" ||
    fail "kvsh '$1' failed:"$'\n'"$(tail -20 "$TMP/kvsh.err")"
}

echo "== first run: keys written"
start_cluster "$TMP/run1" || fail "the cluster did not start:"$'\n'"$(tail -20 "$TMP/run1.err")"
value=$(head -c 3000 /dev/zero | tr '\0' 'v')  # out of line: an object of its own
shell "set alpha 1; set beta hello; set big $value; set gone x; del gone"
stop_cluster "$TMP/run1"
echo "ok: stopped, every node's regions on disk"

echo "== a restart without node 2's directory does not form"
mv "$data/node-2" "$TMP/node-2.saved"
expect_refused "$TMP/missing" "restarts without it: forming the cluster would lose its data"
rm -rf "$data/node-2"
mv "$TMP/node-2.saved" "$data/node-2"
echo "ok: refused, and said why"

echo "== second run on the same directories: every key is back"
start_cluster "$TMP/run2" || fail "the restart failed:"$'\n'"$(tail -20 "$TMP/run2.err")"
grep -q "the cluster restarts from its nodes' data directories" "$TMP/run2.err" ||
  fail "the CM did not restore the regions:"$'\n'"$(tail -20 "$TMP/run2.err")"
shell "get alpha; get beta; get gone; set gamma 3; get gamma"
[ "$(cat "$TMP/kvsh.out")" = '"1"
"hello"
(nil)
OK
"3"' ] || fail "after the restart kvsh printed:"$'\n'"$(cat "$TMP/kvsh.out")"
shell "get big"
[ "$(cat "$TMP/kvsh.out")" = "\"$value\"" ] || fail "the 3000-byte value came back different"
echo "ok: alpha, beta and the 3000-byte value back, the deleted key still gone, new keys taken"

echo "== every node killed at once right after writes: the restart recovers them from the backups"
shell "set delta 4; set beta changed; del alpha; set big2 ${value}2"
victims=()
for n in 0 1 2; do
  p=$(pgrep -f -- "$NODE --config=.* --node_id=$n" | head -1)
  [ -n "$p" ] || fail "no process for node $n"
  victims+=("$p")
done
kill -KILL "${victims[@]}"  # all at once: a node that lost its CM would leave by itself
kill -TERM "$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pid=
expect_no_process "$NODE --config"
start_cluster "$TMP/run3" || fail "the restart after the crash failed:"$'\n'"$(tail -20 "$TMP/run3.err")"
grep -q "the cluster restarts after a crash" "$TMP/run3.err" ||
  fail "the CM did not recover the regions:"$'\n'"$(tail -20 "$TMP/run3.err")"
shell "get alpha; get beta; get delta; get gamma; set epsilon 5; get epsilon"
[ "$(cat "$TMP/kvsh.out")" = '(nil)
"changed"
"4"
"3"
OK
"5"' ] || fail "after the crash and restart kvsh printed:"$'\n'"$(cat "$TMP/kvsh.out")"
shell "get big2"
[ "$(cat "$TMP/kvsh.out")" = "\"${value}2\"" ] || fail "the 3001-byte value came back different"
stop_cluster "$TMP/run3"
echo "ok: every write acknowledged before the kill is back, and new ones are taken"
trap - EXIT
echo "PASS"
