#!/usr/bin/env bash
# Every error a user can cause gets a clear message and a non-zero exit, never a crash or a hang:
# bad flags, unknown provider, missing or garbled configuration, a node id not in the
# configuration, a configuration manager that cannot be reached, a peer that never comes up, a
# locked-memory limit too low to pin the regions. Also: --help works for every binary.
source "$(dirname "$0")/lib.sh"
NODE=$(bin node) || exit 1
CLUSTER=$(bin cluster) || exit 1

# Two distinct free ports: both sockets are held until both numbers are known.
read -r P0 P1 < <(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
cfg="$TMP/two.textproto"
cat >"$cfg" <<CFG
provider: "shm"
region_size: 1048576
region_count: 2
join_timeout_s: 3
node { id: 0 host: "127.0.0.1" control_port: $P0 }
node { id: 1 host: "127.0.0.1" control_port: $P1 }
CFG

echo "== --help"
for b in "$NODE" "$CLUSTER"; do
  expect_fail 1 "--config|--nodes" -- "$b" --help  # absl exits 1 after printing help
done

echo "== flags"
expect_fail 2 "--config is required" -- "$NODE"
expect_fail 2 "unknown provider 'carrier-pigeon'" -- "$NODE" --config="$cfg" --node_id=0 --provider=carrier-pigeon
expect_fail 2 "unknown provider 'carrier-pigeon'" -- "$CLUSTER" --provider=carrier-pigeon
expect_fail 2 "poll mode 'sometimes'" -- "$NODE" --config="$cfg" --node_id=0 --poll=sometimes
expect_fail 2 "--poll must be busy or adaptive" -- "$CLUSTER" --poll=sometimes
expect_fail 2 "unknown endpoint type 'datagram'" -- "$NODE" --config="$cfg" --node_id=0 --endpoint=datagram
expect_fail 1 "provider 'shm' has no connected \(MSG\) endpoint" -- "$NODE" --config="$cfg" --node_id=0 --endpoint=msg
expect_fail 2 "unknown log level" -- "$NODE" --config="$cfg" --log_level=loud
expect_fail 2 "--nodes must be between" -- "$CLUSTER" --nodes=0
expect_fail 1 "Unknown command line flag 'bogus'" -- "$NODE" --bogus=1

echo "== configuration files"
expect_fail 2 "cannot read configuration file $TMP/missing" -- "$NODE" --config="$TMP/missing" --node_id=0
printf 'provider: "shm"\nnode { id: 0 host: "127.0.0.1" control_port: 1 \n regoin_size: 5\n' >"$TMP/garbled"
expect_fail 2 "garbled: not a valid cluster configuration: line 3" -- "$NODE" --config="$TMP/garbled" --node_id=0
printf 'node { id: 0 host: "h" control_port: 1 }\nnode { id: 0 host: "h" control_port: 2 }\n' >"$TMP/dup"
expect_fail 2 "node id 0 is listed twice" -- "$NODE" --config="$TMP/dup" --node_id=0
printf 'region_size: 1000\nnode { id: 0 host: "h" control_port: 1 }\n' >"$TMP/size"
expect_fail 2 "region_size 1000 is not a multiple of 4096" -- "$NODE" --config="$TMP/size" --node_id=0
printf 'provider: "infiniband"\nnode { id: 0 host: "h" control_port: 1 }\n' >"$TMP/prov"
expect_fail 2 "unknown provider 'infiniband'" -- "$NODE" --config="$TMP/prov" --node_id=0
expect_fail 2 "--node_id=7 is not listed" -- "$NODE" --config="$cfg" --node_id=7
printf 'lease_ms: 5\nnode { id: 0 host: "h" control_port: 1 }\n' >"$TMP/lease"
expect_fail 2 "lease_ms 5 is out of range" -- "$NODE" --config="$TMP/lease" --node_id=0
printf 'f: 1\nnode { id: 0 host: "h" control_port: 1 }\nnode { id: 1 host: "h" control_port: 2 }\n' >"$TMP/f"
expect_fail 2 "f 1 keeps 2 copies of every region in distinct failure domains, but the nodes that form the cluster are in 1: 'host h' \(nodes 0, 1\)" -- "$NODE" --config="$TMP/f" --node_id=0
expect_fail 2 "f 3 keeps 4 copies .* are in 3: 'process 0' \(node 0\), 'process 1' \(node 1\), 'process 2' \(node 2\)" -- "$CLUSTER" --nodes=3 --f=3
expect_fail 2 "--f must be 0 or more" -- "$CLUSTER" --f=-1

echo "== peers that never come up"
# Node 1 alone: the configuration manager (node 0) is not running.
sed 's/join_timeout_s: 3/join_timeout_s: 2/' "$cfg" >"$TMP/short.textproto"
expect_fail 1 "cannot reach the configuration manager at 127.0.0.1:$P0" -- \
  "$NODE" --config="$TMP/short.textproto" --node_id=1
# Node 0 alone: its peer, node 1, never joins; the error names it.
expect_fail 1 "node 1 \(127.0.0.1:$P1\) did not join within 2 s" -- \
  "$NODE" --config="$TMP/short.textproto" --node_id=0
expect_no_process "$NODE --config"

echo "== locked-memory limit"
# Root is exempt from RLIMIT_MEMLOCK through CAP_IPC_LOCK; drop it so the limit applies.
drop=()
if [ "$(id -u)" = 0 ]; then drop=(setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock --); fi
expect_fail 1 "ulimit -l unlimited" -- prlimit --memlock=65536:65536 "${drop[@]}" \
  "$NODE" --config="$cfg" --node_id=0
echo "PASS"
