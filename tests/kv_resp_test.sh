#!/usr/bin/env bash
# //tools:kv_resp, the RESP gateway, driven by Debian's Redis tools on real node processes:
# kv_resp --local=2 on a free port (--port=0, read from its READY line) and a Unix socket; then
# redis-cli (set, get, incr, mget, mset, del, exists, scan, --scan, dbsize, -x with a binary
# value, errors), the same command script run against a real redis-server and the gateway with
# the outputs compared byte for byte, redis-cli --pipe (a bulk load), redis-benchmark (SET and
# GET, pipelined, 50 connections: no errors; its speed is not looked at), redis-cli -s on the
# Unix socket, raw frames (inline commands, a pipelined batch written in one go, a bulk longer
# than the value limit, an absurd multibulk count: "-ERR Protocol error" and that connection
# closed, the gateway serving on), a gateway attached to a running //tools:cluster with
# --config, SIGTERM (exit 0, socket removed, no node left), and bad flags (exit 2). Skipped
# without redis-cli and redis-benchmark.
source "$(dirname "$0")/lib.sh"
KVRESP=$(bin kv_resp) || exit 1
CLUSTER=$(bin cluster) || exit 1
command -v redis-cli >/dev/null && command -v redis-benchmark >/dev/null ||
  skip "redis-cli and redis-benchmark (Debian's redis-tools) are not installed"
export TMPDIR="$TMP"  # the gateway's node logs and configuration
provider=${FARM_TEST_PROVIDER:-shm}
common=(--provider="$provider" --host=127.0.0.1 --lock_memory=false)

# Unix socket paths must fit 107 bytes, which Bazel's $TEST_TMPDIR may not.
SOCKS=$(mktemp -d /tmp/kv_resp_test.XXXXXX)
gw_pid=""
redis_pid=""
cleanup() {
  [ -n "$gw_pid" ] && kill -KILL "$gw_pid" 2>/dev/null
  [ -n "$redis_pid" ] && kill -KILL "$redis_pid" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$SOCKS"
}
trap cleanup EXIT

# start_gateway NAME ARGS...: starts kv_resp in the background and waits (bounded) for its READY
# line; sets gw_pid and PORT.
start_gateway() {
  local name=$1
  shift
  "$KVRESP" --port=0 "$@" >"$TMP/$name.out" 2>"$TMP/$name.err" &
  gw_pid=$!
  for _ in $(seq 1 900); do
    if grep -q '^READY ' "$TMP/$name.out"; then
      PORT=$(sed -n 's/^READY port=\([0-9]*\).*/\1/p' "$TMP/$name.out")
      return 0
    fi
    kill -0 "$gw_pid" 2>/dev/null || { cat "$TMP/$name.err"; fail "kv_resp exited before READY"; }
    sleep 0.1
  done
  cat "$TMP/$name.err"
  fail "kv_resp was not READY within 90 s"
}

# stop_gateway NAME: SIGTERM; it must exit 0 within 30 s.
stop_gateway() {
  kill -TERM "$gw_pid"
  local rc=""
  for _ in $(seq 1 300); do
    if ! kill -0 "$gw_pid" 2>/dev/null; then
      wait "$gw_pid"
      rc=$?
      break
    fi
    sleep 0.1
  done
  [ -n "$rc" ] || fail "kv_resp did not stop within 30 s of SIGTERM"
  [ "$rc" = 0 ] || { cat "$TMP/$1.err"; fail "kv_resp exited $rc after SIGTERM, not 0"; }
  gw_pid=""
}

# cli ARGS...: redis-cli against the gateway, bounded.
cli() { timeout 30 redis-cli -p "$PORT" "$@"; }
# expect WHAT GOT WANT
expect() {
  [ "$2" = "$3" ] || fail "$1:"$'\n'"--- got"$'\n'"$2"$'\n'"--- expected"$'\n'"$3"
}
# raw BYTES: writes BYTES (printf escapes) on one connection at once and prints what comes back
# until the gateway closes it (<EOF>) or it stays quiet for a second (<open>).
raw() {
  python3 - "$PORT" "$1" <<'EOF'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(sys.argv[2].encode().decode("unicode_escape").encode("latin1"))
s.settimeout(1)
out = b""
try:
    while True:
        b = s.recv(65536)
        if not b:
            out += b"<EOF>"
            break
        out += b
except socket.timeout:
    out += b"<open>"
sys.stdout.write(out.decode("latin1"))
EOF
}

echo "== kv_resp --local=2 on TCP and a Unix socket"
start_gateway local --local=2 "${common[@]}" --unix_socket="$SOCKS/kv.sock"
expect "ping" "$(cli ping)" "PONG"
expect "set" "$(cli set a 1)" "OK"
expect "get" "$(cli get a)" "1"
expect "incr" "$(cli incr a)" "2"
expect "incrby" "$(cli incrby a 10)" "12"
expect "mset" "$(cli mset x 1 y 2)" "OK"
expect "mget" "$(cli mget x nosuch y)" $'1\n\n2'
expect "exists" "$(cli exists a x nosuch a)" "3"
expect "del" "$(cli del a x nosuch)" "2"
expect "exists after del" "$(cli exists a x)" "0"
expect "dbsize" "$(cli dbsize)" "1"
printf 'one\r\ntwo\0three' | cli -x set bin >/dev/null
expect "a binary value with \\r\\n and a zero byte" "$(cli get bin | od -c)" \
  "$(printf 'one\r\ntwo\0three\n' | od -c)"
expect "strlen" "$(cli strlen bin)" "14"
expect "unknown command" "$(cli foo a b 2>&1)" "ERR unknown command 'foo', with args beginning with: 'a' 'b' "
expect "arity" "$(cli get 2>&1)" "ERR wrong number of arguments for 'get' command"
expect "not an integer" "$(cli incr bin 2>&1)" "ERR value is not an integer or out of range"
expect "unix socket" "$(timeout 30 redis-cli -s "$SOCKS/kv.sock" get y)" "2"
expect "hello 3" "$(cli hello 3 2>&1)" "NOPROTO unsupported protocol version"

echo "== scan, --scan, keys"
for i in $(seq 1 30); do echo "SET key:$i v$i"; done | cli >/dev/null
expect "--scan" "$(cli --scan --pattern 'key:*' | sort)" "$(seq 1 30 | sed 's/^/key:/' | sort)"
cursor=0
keys=()
for _ in $(seq 1 10000); do
  mapfile -t step < <(cli scan "$cursor" match 'key:*' count 100)
  cursor=${step[0]}
  keys+=("${step[@]:1}")
  [ "$cursor" = 0 ] && break
done
expect "scan to cursor 0" "$(printf '%s\n' "${keys[@]}" | grep -v '^$' | sort)" \
  "$(seq 1 30 | sed 's/^/key:/' | sort)"
expect "keys" "$(cli keys 'key:1*' | sort)" "$({ echo key:1; seq 10 19 | sed 's/^/key:/'; } | sort)"

echo "== redis-cli --pipe"
for i in $(seq 1 1000); do printf '*3\r\n$3\r\nSET\r\n$%d\r\npipe:%d\r\n$1\r\nv\r\n' $((5 + ${#i})) "$i"; done \
  >"$TMP/pipe.resp"
out=$(timeout 60 redis-cli -p "$PORT" --pipe <"$TMP/pipe.resp" 2>&1) || fail "redis-cli --pipe failed:"$'\n'"$out"
grep -q "errors: 0, replies: 1000" <<<"$out" || fail "redis-cli --pipe:"$'\n'"$out"
expect "dbsize after the bulk load" "$(cli dbsize)" "1032"

echo "== redis-benchmark"
# -q redraws its progress line with \r: one line per report.
out=$(timeout 120 redis-benchmark -p "$PORT" -t set,get -n 2000 -P 16 -q 2>&1) ||
  fail "redis-benchmark failed:"$'\n'"$out"
out=$(tr '\r' '\n' <<<"$out")
grep -qE '^SET: [0-9.]+ requests per second' <<<"$out" || fail "no SET result:"$'\n'"$out"
grep -qE '^GET: [0-9.]+ requests per second' <<<"$out" || fail "no GET result:"$'\n'"$out"
! grep -qiE 'error|ERR ' <<<"$out" || fail "redis-benchmark reports errors:"$'\n'"$out"
out=$(timeout 120 redis-benchmark -s "$SOCKS/kv.sock" -t incr,mset -n 500 -q 2>&1) ||
  fail "redis-benchmark on the Unix socket failed:"$'\n'"$out"
out=$(tr '\r' '\n' <<<"$out")
grep -qE '^INCR: ' <<<"$out" && grep -qE '^MSET \(10 keys\): ' <<<"$out" ||
  fail "redis-benchmark on the Unix socket:"$'\n'"$out"
! grep -qiE 'error|ERR ' <<<"$out" || fail "redis-benchmark reports errors:"$'\n'"$out"

echo "== raw frames"
expect "inline commands" "$(raw 'PING\r\nECHO "a b"\r\n\r\nset k1 "x\\r\\ny"\nGET k1\r\n')" \
  $'+PONG\r\n$3\r\na b\r\n+OK\r\n$4\r\nx\r\ny\r\n<open>'
expect "a pipelined batch" \
  "$(raw '*3\r\n$3\r\nSET\r\n$2\r\nk2\r\n$1\r\n5\r\n*2\r\n$4\r\nINCR\r\n$2\r\nk2\r\n*2\r\n$3\r\nGET\r\n$2\r\nk2\r\n')" \
  $'+OK\r\n:6\r\n$1\r\n6\r\n<open>'
expect "a bulk over the value limit" "$(raw '*2\r\n$3\r\nGET\r\n$1048577\r\n')" \
  $'-ERR Protocol error: invalid bulk length\r\n<EOF>'
expect "an absurd multibulk count" "$(raw '*99999999999\r\n')" \
  $'-ERR Protocol error: invalid multibulk length\r\n<EOF>'
expect "a frame that is not RESP" "$(raw '*1\r\nx\r\n')" \
  $'-ERR Protocol error: expected \'$\', got \'x\'\r\n<EOF>'
expect "unbalanced quotes" "$(raw 'PING\r\nGET "a\r\n')" \
  $'+PONG\r\n-ERR Protocol error: unbalanced quotes in request\r\n<EOF>'
expect "quit" "$(raw 'QUIT\r\nPING\r\n')" $'+OK\r\n<EOF>'
expect "still serving after the bad frames" "$(cli get k2)" "6"

stop_gateway local
[ ! -e "$SOCKS/kv.sock" ] || fail "the Unix socket was left behind"
expect_no_process "$TMP/kv_resp\."

echo "== the same commands on redis-server and on kv_resp"
if command -v redis-server >/dev/null; then
  redis-server --port 0 --unixsocket "$SOCKS/redis.sock" --save '' --appendonly no \
    >"$TMP/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 1 100); do [ -S "$SOCKS/redis.sock" ] && break; sleep 0.1; done
  start_gateway compare --local=1 "${common[@]}" --unix_socket="$SOCKS/kv2.sock"
  script=(
    'ping' 'ping hello' 'echo "a b"' 'select 0' 'set a 1' 'get a' 'get missing' 'incr a'
    'incrby a -5' 'decr a' 'decrby a 10' 'set s hello' 'incr s' 'append s " world"' 'strlen s'
    'strlen missing' 'setnx s x' 'setnx n x' 'getset n y' 'getset m z' 'set s v nx'
    'set s v xx' 'set s2 v xx' 'set s w get' 'set s3 w nx get' 'mset m1 1 m2 2' 'mget m1 m2 m3'
    'msetnx m1 x m9 y' 'msetnx m8 x m9 y' 'exists m1 m8 nothing' 'del m1 m8 nothing'
    'get' 'set a' 'foo a b' 'incrby a x' 'mset a' 'dbsize' 'client setname t'
  )
  printf '%s\n' "${script[@]}" >"$TMP/compare.txt"
  timeout 30 redis-cli -s "$SOCKS/redis.sock" <"$TMP/compare.txt" >"$TMP/redis.replies" 2>&1
  timeout 30 redis-cli -s "$SOCKS/kv2.sock" <"$TMP/compare.txt" >"$TMP/kv.replies" 2>&1
  diff "$TMP/redis.replies" "$TMP/kv.replies" >"$TMP/diff" ||
    fail "kv_resp answers differently from redis-server (script: ${script[*]}):"$'\n'"$(cat "$TMP/diff")"
  stop_gateway compare
  kill -TERM "$redis_pid"
  wait "$redis_pid" 2>/dev/null
  redis_pid=""
else
  echo "(redis-server is not installed: comparison skipped)"
fi

echo "== kv_resp --config on a running //tools:cluster"
timeout 300 "$CLUSTER" --nodes=2 --late_nodes=1 "${common[@]}" --region_size=16777216 \
  --write_config="$TMP/cluster.textproto" -- --kv >"$TMP/cluster.out" 2>"$TMP/cluster.err" &
cluster_pid=$!
for _ in $(seq 600); do  # ready once it says its self-check is skipped (-- --kv)
  grep -q "^self-check" "$TMP/cluster.out" 2>/dev/null && [ -f "$TMP/cluster.textproto" ] && break
  kill -0 "$cluster_pid" 2>/dev/null || break
  sleep 0.1
done
grep -q "^self-check" "$TMP/cluster.out" ||
  fail "the cluster did not start:"$'\n'"$(cat "$TMP/cluster.out" "$TMP/cluster.err")"
start_gateway attached --config="$TMP/cluster.textproto" --provider="$provider"
expect "set through an attached gateway" "$(cli set c 1)" "OK"
expect "get through an attached gateway" "$(cli get c)" "1"
stop_gateway attached
kill -TERM "$cluster_pid"
wait "$cluster_pid"
[ $? = 0 ] || fail "//tools:cluster did not stop cleanly on SIGTERM"
expect_no_process "$TMP/"

echo "== bad flags"
expect_fail 2 "kv_resp needs a cluster: --local=N" -- "$KVRESP"
expect_fail 2 "--port must be 0 to 65535, not 70000" -- "$KVRESP" --local=1 --port=70000
expect_fail 2 "give either --local=N .* or --config=FILE" -- "$KVRESP" --local=1 --config=x
expect_fail 2 "is not an IPv4 address" -- "$KVRESP" --local=1 --bind=nowhere
expect_fail 2 "unexpected argument 'get'" -- "$KVRESP" --local=1 get
python3 -c 'import socket,time
s=socket.socket(); s.bind(("127.0.0.1",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)' \
  >"$TMP/busy" &
busy_pid=$!
for _ in $(seq 1 50); do [ -s "$TMP/busy" ] && break; sleep 0.1; done
expect_fail 2 "cannot listen on 127.0.0.1:$(cat "$TMP/busy"): Address already in use" -- \
  "$KVRESP" --local=1 --port="$(cat "$TMP/busy")"
kill "$busy_pid"
"$KVRESP" --help >"$TMP/help" 2>&1
grep -q -- "--unix_socket" "$TMP/help" || fail "--help does not list --unix_socket"
grep -q -- "--local" "$TMP/help" || fail "--help does not list --local"
grep -q "Exit status: 0" "$TMP/help" || fail "--help does not explain the exit status"
expect_no_process "$TMP/kv_resp\."
echo "PASS"
