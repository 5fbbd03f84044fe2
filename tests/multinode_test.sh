#!/usr/bin/env bash
# Multi-node test: real node processes started by tools/cluster, one-sided READ and WRITE across
# every ordered pair verified byte for byte at both ends of every region, out-of-region accesses
# refused, for each provider. Afterwards no node process may be left. The nodes lock their memory
# (the default) under the sandbox's 8 MiB locked-memory limit, so without backup copies (--f=0;
# they double the regions a node holds).
#
# Environment: FARM_TEST_PROVIDERS (default "shm tcp;ofi_rxm tcp"; tcp runs connected MSG
# endpoints), FARM_TEST_HOST (default 127.0.0.1), FARM_TEST_NODES (default "3 4"),
# FARM_TEST_ENDPOINT (default auto; rdm or msg).
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
NODE=$(bin node) || exit 1

IFS=' ' read -r -a providers <<<"${FARM_TEST_PROVIDERS:-shm tcp;ofi_rxm tcp}"
IFS=' ' read -r -a sizes <<<"${FARM_TEST_NODES:-3 4}"
host=${FARM_TEST_HOST:-127.0.0.1}
endpoint=${FARM_TEST_ENDPOINT:-auto}

for provider in "${providers[@]}"; do
  for n in "${sizes[@]}"; do
    echo "== $n nodes, provider $provider, endpoint $endpoint, host $host"
    out="$TMP/run.json"
    timeout 180 "$CLUSTER" --nodes="$n" --provider="$provider" --endpoint="$endpoint" \
      --host="$host" \
      --node_binary="$NODE" --exit_after_check --json --log_level=warn --f=0 \
      >"$out" 2>"$TMP/run.err"
    rc=$?
    cat "$out"
    [ "$rc" = 0 ] || { cat "$TMP/run.err"; fail "cluster exited $rc ($n nodes, $provider)"; }
    pairs=$(grep -c '"from":' "$out")
    good=$(grep '"from":' "$out" | grep -c '"ok":true,"read_ok":true,"write_ok":true,"bounds_ok":true')
    want=$((n * (n - 1)))
    [ "$pairs" = "$want" ] || fail "expected $want pair results, got $pairs"
    [ "$good" = "$want" ] || fail "only $good of $want pairs passed"
    # Every pair verified 256 B x 3 (read, write, restore) x 2 ends x 2 regions.
    bad_bytes=$(grep '"from":' "$out" | grep -vc '"bytes_verified":3072' || true)
    [ "$bad_bytes" = 0 ] || fail "$bad_bytes pairs verified fewer bytes than expected"
    grep -q '"summary":true,"pairs":'"$want"',"passed":'"$want"',"failed":0' "$out" \
      || fail "summary line missing or wrong"
    expect_no_process "$NODE --config"
  done
done
echo "PASS"
