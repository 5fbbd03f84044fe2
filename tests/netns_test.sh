#!/usr/bin/env bash
# The multi-node test across network namespaces: each node runs in its own namespace (the
# project's own test hosts) with one veth link to a bridge, and the nodes reach each other only
# through those links, over tcp;ofi_rxm. Needs root and `ip netns`; elsewhere it prints
# "FARM_TEST_SKIPPED: reason" and exits 0, which .ci/run counts as skipped, not passed.
# All traffic stays between the namespaces' own addresses. Namespaces are removed on exit.
source "$(dirname "$0")/lib.sh"
CLUSTER=$(bin cluster) || exit 1
NODE=$(bin node) || exit 1
N=${FARM_NETNS_NODES:-3}
tag="farm$$"
subnet=10.213.$(( $$ % 200 + 20 ))

[ "$(id -u)" = 0 ] || skip "not root"
command -v ip >/dev/null || skip "no ip command (iproute2)"

cleanup() {
  for i in $(seq 0 $((N - 1))); do ip netns del "$tag-$i" 2>/dev/null; done
  ip netns del "$tag-br" 2>/dev/null
}
trap cleanup EXIT
ip netns add "$tag-br" 2>"$TMP/netns.err" || skip "ip netns add failed: $(cat "$TMP/netns.err")"
ip -n "$tag-br" link add br0 type bridge
ip -n "$tag-br" link set br0 up
hosts=() namespaces=()
for i in $(seq 0 $((N - 1))); do
  ns="$tag-$i"
  ip netns add "$ns"
  ip link add "v$i-$tag" type veth peer name "b$i-$tag"
  ip link set "v$i-$tag" netns "$ns"
  ip link set "b$i-$tag" netns "$tag-br"
  ip -n "$tag-br" link set "b$i-$tag" master br0 up
  ip -n "$ns" link set lo up
  ip -n "$ns" link set "v$i-$tag" name eth0
  ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  hosts+=("$subnet.$((i + 1))")
  namespaces+=("$ns")
done
# The namespaces reach each other (and nothing else: there is no route out).
if command -v ping >/dev/null; then
  ip netns exec "$tag-0" ping -c 1 -W 5 "${hosts[$((N - 1))]}" >/dev/null \
    || fail "namespaces cannot reach each other"
fi

join() { local IFS=,; echo "$*"; }
out="$TMP/netns.json"
timeout 180 "$CLUSTER" --nodes="$N" --provider="tcp;ofi_rxm" --hosts="$(join "${hosts[@]}")" \
  --netns="$(join "${namespaces[@]}")" --node_binary="$NODE" --exit_after_check --json \
  --log_level=warn >"$out" 2>"$TMP/netns.err"
rc=$?
cat "$out"
[ "$rc" = 0 ] || { cat "$TMP/netns.err"; fail "cluster across namespaces exited $rc"; }
want=$((N * (N - 1)))
good=$(grep '"from":' "$out" | grep -c '"ok":true')
[ "$good" = "$want" ] || fail "only $good of $want pairs passed across namespaces"
expect_no_process "$NODE --config"
echo "PASS"
