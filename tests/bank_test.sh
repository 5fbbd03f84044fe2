#!/usr/bin/env bash
# examples/bank (transactions through //:farm only) launched by tools/cluster on 3 real node
# processes, for each provider, with its flags passed after `--`: node 0 creates the accounts, the
# others fetch their addresses, every node transfers and audits, node 0's final audit balances, and
# no process is left behind. With a fixed number of transfers, every one is accounted for. A bank
# that leaks money on purpose must fail its audits; bad bank flags fail the application.
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
BANK=${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-farm}/examples/bank
[ -x "$BANK" ] || BANK="$_root/bazel-bin/examples/bank"

IFS=' ' read -r -a providers <<<"${FARM_TEST_PROVIDERS:-shm tcp;ofi_rxm}"
host=${FARM_TEST_HOST:-127.0.0.1}
n=3
# A bank node locks its regions, rings and one 1 MiB buffer per Worker (--threads + 1): 8.4 MiB with
# 2 threads, above the default 8 MiB locked-memory limit that binds inside Bazel's sandbox (no
# CAP_IPC_LOCK there). Locking is not what this test is about.
unlocked=--lock_memory=false

# bank PROVIDER BANK_FLAGS...: runs the bank on $n nodes; its output in $TMP/bank.out.
bank() {
  local provider=$1
  shift
  timeout 180 "$CLUSTER" --nodes=$n --provider="$provider" --host="$host" $unlocked \
    --node_binary="$BANK" --log_level=warn -- "$@" >"$TMP/bank.out" 2>"$TMP/bank.err"
  local rc=$?
  cat "$TMP/bank.out"
  [ "$rc" = 0 ] || { cat "$TMP/bank.err"; fail "bank $* exited $rc on $provider"; }
  expect_no_process "$BANK --config"
}

has() { grep -qE -- "$1" "$TMP/bank.out" || fail "no line /$1/"; }

for provider in "${providers[@]}"; do
  echo "== bank on $n nodes for 1 s, provider $provider"
  bank "$provider" --accounts=30 --initial_balance=500 --threads=2 --duration_s=1
  has "^application bank: $n/$n nodes succeeded$"
  has "^\[node 0\] bank: node 0 created 30 accounts of 500 on nodes 0, 1, 2 \(0: [0-9]+, 1: [0-9]+, 2: [0-9]+ accounts\)$"
  for i in $(seq 0 $((n - 1))); do
    [ "$i" = 0 ] || has "^\[node $i\] bank: node $i fetched 30 account addresses from node 0$"
    has "^\[node $i\] bank: node $i: 2 threads, [0-9]+ transfers committed \([0-9]+ declined: insufficient funds, [0-9]+ aborted and retried\), [0-9]+ audits passed"
  done
  has "^\[node 0\] bank: $n nodes: [0-9]+ transfers committed"
  has "^\[node 0\] bank: total 15000 == expected 15000$"
done

echo "== a fixed number of transfers: every one committed or declined"
bank "${providers[0]}" --accounts=10 --threads=2 --transfers=15
line=$(grep -E "^\[node 0\] bank: $n nodes: " "$TMP/bank.out") || fail "no summary"
committed=$(sed -E 's/.* ([0-9]+) transfers committed \(([0-9]+) declined.*/\1/' <<<"$line")
declined=$(sed -E 's/.* ([0-9]+) transfers committed \(([0-9]+) declined.*/\2/' <<<"$line")
[ $((committed + declined)) = $((n * 2 * 15)) ] ||
  fail "$committed committed + $declined declined transfers, expected $((n * 2 * 15))"
has "^\[node 0\] bank: total 10000 == expected 10000$"

echo "== a bank that loses money fails its audits"
expect_fail 1 "an audit found a total of [0-9]+, expected 10000|bank: total [0-9]+ != expected 10000" -- \
  "$CLUSTER" --nodes=$n --provider="${providers[0]}" --host="$host" $unlocked \
  --node_binary="$BANK" --log_level=warn -- --accounts=10 --threads=1 --transfers=20 --leak_every=3
expect_no_process "$BANK --config"

echo "== bad bank flags"
expect_fail 1 "--threads must be >= 1" -- "$CLUSTER" --nodes=$n --provider="${providers[0]}" \
  --host="$host" $unlocked --node_binary="$BANK" --log_level=warn -- --threads=0
expect_no_process "$BANK --config"
expect_fail 2 "unexpected argument 'stray'" -- "$CLUSTER" --node_binary="$BANK" stray
"$BANK" --help >"$TMP/help.out" 2>&1
for flag in --accounts --threads --duration_s --transfers --node_id --config; do
  grep -q -- "$flag " "$TMP/help.out" || fail "--help does not list $flag"
done
echo "PASS"
