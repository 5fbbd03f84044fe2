#!/usr/bin/env bash
# The main job. Installs whatever is missing and builds; then
#  1. starts a local cluster of 3 symmetric node processes connected all-to-all and prints the
#     one-sided READ/WRITE self-check for every ordered pair;
#  2. runs the example applications on 3 nodes (examples/hello.cc; examples/bank.cc: transactions);
#     then kills a node, and the configuration manager's node, of a replicated cluster under the
#     bank's load and shows the recovery (//tools:chaos);
#  3. the key-value store: starts a local 3-node cluster holding the store's shards (with a local
#     ZooKeeper holding its configuration, so that if the configuration manager's node dies
#     another node takes the role over), loads keys
#     into it (with a progress bar), runs a short //tools:kvbench of the store against memcached
#     and Redis on the same load and prints the table, starts the Redis protocol gateway
#     (//tools:kv_resp) on that cluster and prints its port, and leaves you in //tools:kvsh on the
#     cluster, while redis-cli -p PORT reaches the same store (type `help`; `quit` or Ctrl-D stops
#     the gateway and the cluster). --no-shell checks the gateway with redis-cli and stops instead.
# Extra arguments go to every cluster (//tools:cluster, see --help), e.g.
#   ./run.sh --provider=shm
set -euo pipefail
cd "$(dirname "$0")"
no_shell=0
args=()
provider="tcp;ofi_rxm"  # the key-value cluster's, unless --provider says
for a in "$@"; do
  case "$a" in
    --no-shell) no_shell=1 ;;
    --provider=*) provider=${a#--provider=}; args+=("$a") ;;
    *) args+=("$a") ;;
  esac
done
[ "$provider" = auto ] && provider="tcp;ofi_rxm"
third_party/install_deps.sh
bazel build //tools:cluster //tools:node //tools:kvbench //tools:kvsh //tools:kv_resp //tools:chaos \
  //examples:all
bazel run //tools:cluster -- --nodes=3 --exit_after_check "${args[@]}"
bazel run //examples:hello_cluster -- --nodes=3 "${args[@]}"
bazel run //examples:bank_cluster -- --nodes=3 "${args[@]}"
echo
echo "== failures: 3 node processes with one backup per region (f = 1) run the bank and a KV"
echo "   workload; one node is killed (kill -9), then, in a second cluster, the configuration"
echo "   manager's node (a local ZooKeeper hands its role to another node). Checked: no committed"
echo "   transaction lost, the bank's total, the histories; 'rec p50' is the time until throughput"
echo "   was back to 90 % (//tools:chaos, README 'Consistency and failures')"
bazel-bin/tools/chaos --provider="$provider" --scenarios=kill9,kill_cm --faults=1 --duration_ms=5000 --log_level=warning

# The key-value store: a cluster with three spare client slots (late nodes): kvbench attaches,
# then the Redis protocol gateway and kvsh, side by side.
keys=100000
work=$(mktemp -d /tmp/farm-run.XXXXXX)
cluster_pid= gateway_pid=
stop_cluster() {
  if [ -n "$gateway_pid" ]; then
    kill "$gateway_pid" 2>/dev/null || true
    wait "$gateway_pid" 2>/dev/null || true
  fi
  if [ -n "$cluster_pid" ]; then
    kill "$cluster_pid" 2>/dev/null || true
    wait "$cluster_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap stop_cluster EXIT
echo
echo "== the key-value store: a 3-node cluster holding its shards"
# Busy polling (FaRM's): a shard node serves tcp;ofi_rxm READs and every message only while its
# poller runs; an adaptive poller that sleeps when idle makes each GET wait for it to wake.
bazel-bin/tools/cluster --nodes=3 --late_nodes=3 --write_config="$work/cluster.textproto" \
  --self_check=false --region_size=$((16 << 20)) --poll=busy --zookeeper=local "${args[@]}" \
  --provider="$provider" \
  -- --kv --kv_buckets=16384 >"$work/cluster.log" 2>&1 &
cluster_pid=$!
for _ in $(seq 600); do
  grep -q "^cluster ready" "$work/cluster.log" && break
  if ! kill -0 "$cluster_pid" 2>/dev/null; then
    cat "$work/cluster.log" >&2
    echo "the key-value cluster did not start (its log is above)" >&2
    exit 1
  fi
  sleep 0.1
done
grep "^cluster ready" "$work/cluster.log" || { cat "$work/cluster.log" >&2; exit 1; }
echo "== a short kvbench: this machine's cores shared by 3 busy-polling nodes, kvbench and the"
echo "   peers, nothing pinned (the pinned comparison is README.md, 'Key-value store: performance')"
bazel-bin/tools/kvbench --cluster_config="$work/cluster.textproto" --poll=busy \
  --keys=$keys --progress --targets=farm,farm-rpc,memcached,memcached-buf,redis \
  --workloads=b,c --dists=uniform,zipf --threads=1 --in_flight=1,8 --warmup_ms=200 \
  --duration_ms=1000
echo
echo "== the Redis protocol gateway on that cluster (//tools:kv_resp; README, 'Redis protocol gateway')"
bazel-bin/tools/kv_resp --config="$work/cluster.textproto" --port=0 --log_level=warning \
  >"$work/gateway.out" 2>"$work/gateway.log" &
gateway_pid=$!
port=
for _ in $(seq 900); do
  port=$(sed -n 's/^READY port=\([0-9]*\).*/\1/p' "$work/gateway.out")
  [ -n "$port" ] && break
  if ! kill -0 "$gateway_pid" 2>/dev/null; then
    cat "$work/gateway.log" >&2
    echo "the Redis protocol gateway did not start (its log is above)" >&2
    exit 1
  fi
  sleep 0.1
done
[ -n "$port" ] || { cat "$work/gateway.log" >&2; echo "the gateway was not ready within 90 s" >&2; exit 1; }
echo "redis-cli -p $port get user000000000042"
redis-cli -p "$port" get user000000000042 | head -c 120
echo
if [ "$no_shell" = 1 ]; then
  redis-cli -p "$port" ping | grep -qx PONG || { echo "the gateway did not answer PING" >&2; exit 1; }
  exit 0
fi
echo
echo "== kvsh on that cluster ($keys keys loaded: try 'get user000000000042', 'stats', 'help');"
echo "   meanwhile the same store answers the Redis protocol: redis-cli -p $port"
bazel-bin/tools/kvsh --config="$work/cluster.textproto"
