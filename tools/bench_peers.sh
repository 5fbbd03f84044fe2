#!/usr/bin/env bash
# Starts and stops the peer stores of the benchmarks (//tools:txn_bench: Redis, PostgreSQL;
# //tools:kvbench: memcached, Redis) on private sockets, for one run:
#
#   bench_peers.sh start SERVER unix|tcp PORT [THREADS MEMORY_MB]   prints "DIR <dir>" once it answers
#   bench_peers.sh stop  SERVER DIR                                  stops it, removes DIR
#
# SERVER is redis, postgres or memcached. unix: the server listens only on a Unix socket in DIR
# (redis.sock, memcached.sock; PostgreSQL's .s.PGSQL.PORT); tcp: only on 127.0.0.1:PORT. None keeps
# anything on disk that matters: Redis without RDB or AOF, PostgreSQL with fsync,
# synchronous_commit and full_page_writes off (farm keeps nothing on disk either). memcached runs
# THREADS worker threads (-t, default 4) with MEMORY_MB of item memory (-m, default 64; size it so
# that nothing is evicted). DIR is a fresh directory under /tmp (short: Unix socket paths are
# limited to 107 bytes). PostgreSQL refuses to run as root: as root, initdb and the server run as
# the `postgres` user (Debian's postgresql package creates it) through runuser; memcached runs as
# root only when told so (-u root).
# Servers inherit the caller's CPU affinity (txn_bench --cpus pins itself before calling this;
# kvbench runs this script under `taskset -c STORE_CPUS`).
# Exit status: 0 ok, 3 the server's package is not installed, 1 anything else.
# BENCH_PEERS_TMP: the parent of the server directories (default /tmp; keep it short).
set -euo pipefail

PG_BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)

die() {
  echo "$*" >&2
  exit 1
}

as_pg() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start_redis() {
  local transport=$1 port=$2 dir
  command -v redis-server >/dev/null || { echo "redis-server is not installed (apt-get install redis-server)"; exit 3; }
  dir=$(mktemp -d "${BENCH_PEERS_TMP:-/tmp}/bench_redis.XXXXXX")
  local listen=(--port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700)
  [ "$transport" = tcp ] && listen=(--port "$port" --bind 127.0.0.1)
  redis-server --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir" \
    --save '' --appendonly no --protected-mode no "${listen[@]}" ||
    { rm -rf "$dir"; die "redis-server did not start"; }
  local cli=(redis-cli -s "$dir/redis.sock")
  [ "$transport" = tcp ] && cli=(redis-cli -h 127.0.0.1 -p "$port")
  for _ in $(seq 100); do
    if "${cli[@]}" ping 2>/dev/null | grep -q PONG; then echo "DIR $dir"; return 0; fi
    sleep 0.1
  done
  cat "$dir/redis.log" >&2 || true
  stop_redis "$dir"
  die "redis-server did not answer within 10 s"
}

# stop_pid DIR NAME: stops the server whose pid is in DIR/NAME.pid (waiting up to 10 s), removes DIR.
stop_pid() {
  local dir=$1 name=$2 pid
  [ -f "$dir/$name.pid" ] && pid=$(cat "$dir/$name.pid") && kill "$pid" 2>/dev/null &&
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -rf "$dir"
}

stop_redis() { stop_pid "$1" redis; }

start_memcached() {
  local transport=$1 port=$2 threads=${3:-4} memory=${4:-64} dir
  command -v memcached >/dev/null || { echo "memcached is not installed (apt-get install memcached)"; exit 3; }
  command -v memcping >/dev/null || { echo "memcping is not installed (apt-get install libmemcached-tools)"; exit 3; }
  dir=$(mktemp -d "${BENCH_PEERS_TMP:-/tmp}/bench_memcached.XXXXXX")
  local user=() listen=(-s "$dir/memcached.sock" -a 0700) server="$dir/memcached.sock"
  # As root memcached insists on -u; root itself keeps the socket in DIR reachable and works in
  # a sandbox's user namespace, where `nobody` may not be mapped.
  if [ "$(id -u)" = 0 ]; then user=(-u root); fi
  [ "$transport" = tcp ] && listen=(-l 127.0.0.1 -p "$port" -U 0) && server="127.0.0.1:$port"
  memcached "${user[@]}" "${listen[@]}" -t "$threads" -m "$memory" -c 1024 \
    </dev/null >"$dir/memcached.log" 2>&1 &
  echo $! >"$dir/memcached.pid"
  for _ in $(seq 100); do
    if memcping --servers="$server" 2>/dev/null; then echo "DIR $dir"; return 0; fi
    kill -0 "$(cat "$dir/memcached.pid")" 2>/dev/null || break
    sleep 0.1
  done
  cat "$dir/memcached.log" >&2 || true
  stop_memcached "$dir"
  die "memcached did not answer within 10 s"
}

stop_memcached() { stop_pid "$1" memcached; }

start_postgres() {
  local transport=$1 port=$2 dir
  [ -n "$PG_BIN" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)"; exit 3; }
  dir=$(mktemp -d "${BENCH_PEERS_TMP:-/tmp}/bench_pg.XXXXXX")
  if [ "$(id -u)" = 0 ]; then chown postgres: "$dir"; fi
  chmod 700 "$dir"
  as_pg "$PG_BIN/initdb" -D "$dir/data" -A trust -U bench --no-sync -E UTF8 >"$dir/initdb.log" 2>&1 ||
    { cat "$dir/initdb.log" >&2; rm -rf "$dir"; die "initdb failed"; }
  local listen="''"
  [ "$transport" = tcp ] && listen=127.0.0.1
  as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 30 \
    -o "-p $port -k $dir -c listen_addresses=$listen -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=64" \
    start >/dev/null || { cat "$dir/server.log" >&2; rm -rf "$dir"; die "postgres did not start"; }
  echo "DIR $dir"
}

stop_postgres() {
  local dir=$1
  [ -n "$PG_BIN" ] && [ -d "$dir/data" ] && as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -m fast -w -t 30 stop >/dev/null 2>&1
  rm -rf "$dir"
}

case "${1:-}:${2:-}" in
  start:redis) start_redis "${3:?unix or tcp}" "${4:?port}" ;;
  start:postgres) start_postgres "${3:?unix or tcp}" "${4:?port}" ;;
  start:memcached) start_memcached "${3:?unix or tcp}" "${4:?port}" "${5:-4}" "${6:-64}" ;;
  stop:redis) stop_redis "${3:?dir}" ;;
  stop:postgres) stop_postgres "${3:?dir}" ;;
  stop:memcached) stop_memcached "${3:?dir}" ;;
  *) die "usage: $0 start redis|postgres|memcached unix|tcp PORT [THREADS MEMORY_MB] | stop redis|postgres|memcached DIR" ;;
esac
