#!/usr/bin/env bash
# Linearizability of the KV store, checked for real: 3 node processes (tests/kv_history_app.cc,
# launched by tools/cluster) run concurrent get / GetRpc / MultiGet (by READs and by batched
# RPCs) / put / del / cas and the atomic updates (IncrBy, PutIfAbsent, PutIfPresent, GetAndSet,
# Append, Exists) on a tiny table (3 home buckets of 128 bytes per shard, H = 2) under 48
# keys that are put and deleted all the time, with unique values of every size class (inline, out
# of line, exactly an overflow block's size, chunked), so that entries are displaced, overflow
# chains grow and shrink and
# freed blocks' slots are reused; reads of overflow blocks are delayed now and then to widen the
# races. Every call and return goes to journals (kv/history.h), which //tools/lincheck
# (Porcupine) checks.
#  - on every provider, no failures: the history must be linearizable, and any error other than
#    NotFound fails the run;
#  - on tcp;ofi_rxm, node 2's process exits abruptly in the middle of the run (not on shm: a
#    killed process can wedge shm's shared queues, see tests/txn_fault_test.sh): operations that
#    ended in an error have an unknown outcome, and the history must still be linearizable;
#  - the checker must reject the same history with one read made stale (a control that the
#    pipeline can fail at all); its HTML visualisation is kept in the test's outputs.
# Mutants (platform/mutant.h) that this test catches: kv_skip_block_identity and
# kv_skip_miss_recheck (bazel test --config=mutants --test_env=FARM_MUTANT=<name>).
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
LINCHECK=$(bin lincheck/lincheck) || exit 1
APP=${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-farm}/tests/kv_history_app
[ -x "$APP" ] || APP="$_root/bazel-bin/tests/kv_history_app"

IFS=' ' read -r -a providers <<<"${FARM_TEST_PROVIDERS:-shm tcp;ofi_rxm}"
host=${FARM_TEST_HOST:-127.0.0.1}
out_dir=${TEST_UNDECLARED_OUTPUTS_DIR:-$TMP}
# In the SoftiWARP guest (emulated CPUs, many times slower) fewer spinning threads and a longer
# lease keep healthy nodes from being evicted.
threads=2 lease=3000
if [ "${FARM_TEST_IN_VM:-0}" = 1 ]; then threads=1 lease=15000; fi

record() {  # name provider want_succeeded [node flags...]
  local name=$1 provider=$2 want=$3
  shift 3
  local dir="$TMP/$name"
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== $name: provider $provider"
  # Without backups (--f=0; f = 1 is the default on 3 processes): the mutants lane needs the
  # store's own rate of overflow blocks freed and reused (kv_skip_block_identity survived a
  # run at f = 1); the KV store with backups is kv_failover_test's.
  timeout 120 "$CLUSTER" --nodes=3 --provider="$provider" --host="$host" --node_binary="$APP" \
    --lock_memory=false --log_level=warn --lease_ms="$lease" --f=0 -- --history_dir="$dir" \
    --threads="$threads" "$@" >"$TMP/out" 2>"$TMP/err"
  local rc=$?
  cat "$TMP/out"
  [ "$rc" != 124 ] || { cat "$TMP/err"; fail "$name timed out (a hang)"; }
  grep -q "^application kv_history: $want/3 nodes succeeded$" "$TMP/out" ||
    { tail -50 "$TMP/err"; fail "$name: expected $want/3 nodes to succeed"; }
  expect_no_process "$APP --config"
  ls "$dir"/node*.jsonl >/dev/null || fail "$name: no journals"
}

check() {  # name
  local name=$1
  timeout 300 "$LINCHECK" --timeout=120s --html="$out_dir/$name.html" "$TMP/$name"/node*.jsonl \
    >"$TMP/check" 2>&1
  local rc=$?
  cat "$TMP/check"
  [ "$rc" = 0 ] || fail "$name: the history is not linearizable (exit $rc; see $name.html)"
}

for provider in "${providers[@]}"; do
  tag=${provider//;/_}
  record "plain-$tag" "$provider" 3
  # The workload reached the table's paths (each node saw them at some point).
  grep -q "the table reached: [1-9][0-9]* displaced items, [1-9][0-9]* overflow blocks, [1-9][0-9]* items out of line" \
    "$TMP/out" || fail "plain-$tag: the workload did not reach displacement, chains and out-of-line items"
  check "plain-$tag"
  if [ "$provider" != shm ]; then
    record "dying-$tag" "$provider" 2 --dying_node=2 --die_after_ops=300
    grep -q "\[node 2\] dying now" "$TMP/out" || fail "node 2 did not die"
    check "dying-$tag"
  fi
done

# Control: the same journals plus one completed get that returns a value overwritten before it
# started. Values are unique, so no order explains it: the checker must say so.
last=${providers[-1]//;/_}
python3 - "$TMP/stale.json" "$TMP/plain-$last"/node*.jsonl <<'PY' || fail "no stale read to plant"
import json, sys
puts = []
for path in sys.argv[2:]:
    calls = {}
    for line in open(path):
        ev = json.loads(line)
        if "op" in ev:
            calls[ev["id"]] = ev
        elif ev.get("return") is not None and calls[ev["id"]]["op"] == "put":
            puts.append(dict(calls[ev["id"]], ret=ev["return"]))
for p in puts:
    later = [q for q in puts if q["key"] == p["key"] and q["call"] > p["ret"]]
    if later:
        q = min(later, key=lambda o: o["ret"])
        json.dump({"operations": [{"client": 999, "op": "get", "key": p["key"],
                                   "call": q["ret"] + 1, "return": q["ret"] + 2,
                                   "found": True, "value": p["value"]}]}, open(sys.argv[1], "w"))
        sys.exit(0)
sys.exit(1)
PY
timeout 300 "$LINCHECK" --timeout=120s --html="$out_dir/stale-read.html" \
  "$TMP/plain-$last"/node*.jsonl "$TMP/stale.json" >"$TMP/check" 2>&1
rc=$?
cat "$TMP/check"
[ "$rc" = 1 ] || fail "the checker accepted a stale read (exit $rc)"
[ -s "$out_dir/stale-read.html" ] || fail "no visualisation of the failure"
echo "PASS"
