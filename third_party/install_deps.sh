#!/usr/bin/env bash
# Installs the Debian 12 packages the project builds and tests with, if any is missing.
# Everything comes from Debian's archive: nothing is downloaded during the build itself.
set -euo pipefail

packages=(
  bazel-bootstrap bazel-rules-java   # Bazel 4.2.3 and the rules_java it needs offline
  g++ python3 iproute2 util-linux procps
  libfabric-dev libfabric-bin        # libfabric 1.17 (tcp;ofi_rxm, tcp, shm, verbs providers)
  rdma-core libibverbs-dev librdmacm-dev ibverbs-providers
  libabsl-dev                        # Abseil 20220623
  libprotobuf-dev protobuf-compiler  # protobuf 3.21
  catch2                             # Catch2 2.13
  libspdlog-dev libfmt-dev           # spdlog 1.10 on fmt 9
  libasan8 libubsan1 libtsan2        # gcc 12's sanitizer runtimes (.ci/run's asan and tsan lanes)
  libhiredis-dev redis-server        # txn_bench's and kvbench's Redis peer (hiredis 0.14, Redis 7.0)
  redis-tools                        # redis-cli and redis-benchmark, against //tools:kv_resp
  libpq-dev postgresql               # //tools:txn_bench's PostgreSQL peer (libpq 15, PostgreSQL 15)
  libedit-dev                        # //tools:kvsh's line editing and history (BSD libedit 3.1)
  memcached libmemcached-dev libmemcached-tools  # //tools:kvbench's memcached peer (1.6, libmemcached 1.1)
  python3-matplotlib                 # tools/kvbench_plot.py (the README's plot)
  # The configuration record in ZooKeeper (platform/zookeeper_store.h): the multi-threaded C client
  # (libzookeeper_mt, <zookeeper/zookeeper.h>), and ZooKeeper 3.8 itself for the tests and local
  # clusters, which start their own servers (platform/zookeeper_server.h). zookeeperd pulls in a
  # JRE; its own service is not used (it is left stopped and disabled).
  zookeeperd libzookeeper-mt-dev
)
# Go, for //tools/lincheck (the linearizability checker, built offline from its vendor/): Debian's
# golang-go (Go 1.19) unless the machine has a Go toolchain already (tools/lincheck/go_build.sh
# looks on PATH, then in /usr/local/go/bin and /usr/lib/go/bin).
if ! command -v go >/dev/null && [ ! -x /usr/local/go/bin/go ] && [ ! -x /usr/lib/go/bin/go ]; then
  packages+=(golang-go)
fi

missing=()
for p in "${packages[@]}"; do
  [ "${p:0:1}" = "#" ] && continue
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing missing packages: ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
# zookeeperd starts Debian's own ZooKeeper service on port 2181 when it is installed. Nothing here
# uses it (tests and local clusters start their own servers on free ports), so stop and disable it
# when this script installed it; a service an administrator set up before is left alone.
if [[ " ${missing[*]} " == *" zookeeperd "* ]]; then
  if [ -d /run/systemd/system ]; then
    "${sudo[@]}" systemctl disable --now zookeeper || true
  else
    "${sudo[@]}" service zookeeper stop >/dev/null 2>&1 || true
    "${sudo[@]}" update-rc.d zookeeper disable >/dev/null 2>&1 || true
  fi
fi
