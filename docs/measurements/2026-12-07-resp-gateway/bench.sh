#!/usr/bin/env bash
# redis-benchmark against redis-server and against //tools:kv_resp, side by side, in turns.
# Stores on CPU 1 (redis-server; kv_resp with its --local node(s)), redis-benchmark on CPU 0,
# TCP loopback for both, the same -c/-n/-P/-d. kv_resp's node is --local=1 on shm inside.
set -u
BIN=${BIN:-bazel-bin/tools}  # run from the repository root after bazel build //tools:kv_resp
out=${1:-results.csv}
: > "$out"
run_redis() {
  local port=$1
  taskset -c 1 redis-server --port "$port" --save "" --appendonly no --daemonize no >/dev/null 2>&1 &
  echo $!
}
start_gw() {
  local log=$1
  taskset -c 1 "$BIN/kv_resp" --local=1 --provider=shm --port=0 --kv_buckets=262144 \
    --region_size=$((128 << 20)) --log_level=warning >"$log.out" 2>"$log.err" &
  local pid=$!
  for _ in $(seq 600); do
    grep -q '^READY' "$log.out" 2>/dev/null && break
    sleep 0.1
  done
  echo "$pid $(sed -n 's/^READY port=\([0-9]*\).*/\1/p' "$log.out")"
}
bench() {  # target port P round
  local target=$1 port=$2 p=$3 round=$4
  taskset -c 0 redis-benchmark -p "$port" -t set,get -n 100000 -c 50 -P "$p" -d 16 -r 100000 --csv 2>/dev/null |
    grep -E '^"(SET|GET)"' | sed "s/^/$target,$p,$round,/" >>"$out"
}
for round in 1 2 3; do
  for target in redis kv_resp; do
    if [ $target = redis ]; then
      pid=$(run_redis 16379); port=16379; sleep 0.5
    else
      read -r pid port < <(start_gw /tmp/gw$round)
    fi
    for p in 1 16; do bench $target "$port" "$p" "$round"; done
    kill "$pid"; wait "$pid" 2>/dev/null
    sleep 1
  done
done
cat "$out"
