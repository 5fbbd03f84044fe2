#!/usr/bin/env bash
# fabric_bench and msg_bench end to end with tiny sizes on shm (and tcp;ofi_rxm): every JSON line
# has its keys and measured something, the latency table and --threads lines included, with the
# target polling busily and adaptively; bad flags exit 2 with a message; no target node is left
# behind. Never asserts on timings.
set -u
FABRIC=${1:-bazel-bin/tools/fabric_bench}
MSG=${2:-bazel-bin/tools/msg_bench}
TMP=${TEST_TMPDIR:-$(mktemp -d)}
export TMPDIR=$TMP

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# has_keys LINE KEY...: every key present in the JSON object LINE.
has_keys() {
  local line=$1 k
  shift
  for k in "$@"; do
    case "$line" in *"\"$k\":"*) ;; *) fail "missing key $k in: $line" ;; esac
  done
}

# no_target BIN: no target node of this bench is still running.
no_target() {
  if pgrep -f -- "$1 .*--role=target" >/dev/null; then
    fail "a target node of $1 is still running"
  fi
}

for provider in shm 'tcp;ofi_rxm'; do
  for poll in busy adaptive; do
    out=$("$FABRIC" --provider="$provider" --poll="$poll" --sizes=8,4K --iters=50 \
      --duration_ms=50 --json 2>"$TMP/fabric.err") || fail "fabric_bench $provider $poll: $(cat "$TMP/fabric.err")"
    n=0
    while IFS= read -r line; do
      [[ $line == "{"* ]] || continue
      n=$((n + 1))
      has_keys "$line" provider op size p50_us p99_us ops_per_s gbytes_per_s cores_awake
      case "$line" in *'"p50_us":0.000'*) fail "a latency of nothing: $line" ;; esac
    done <<<"$out"
    # READ and WRITE at 2 sizes.
    [ "$n" -eq 4 ] || fail "fabric_bench $provider $poll printed $n JSON lines, not 4: $out"
  done
done

out=$("$FABRIC" --provider=shm --poll=adaptive --threads=1,2 --thread_sizes=8 --duration_ms=50 \
  --json 2>"$TMP/fabric.err") || fail "fabric_bench --threads: $(cat "$TMP/fabric.err")"
n=0
while IFS= read -r line; do
  [[ $line == "{"* ]] || continue
  n=$((n + 1))
  has_keys "$line" provider op size threads channels ops_per_s per_thread_ops_per_s cores_awake
done <<<"$out"
[ "$n" -eq 2 ] || fail "fabric_bench --threads=1,2 printed $n JSON lines, not 2: $out"

for poll in busy adaptive; do
  out=$("$MSG" --provider=shm --poll="$poll" --sizes=8,4096 --iters=50 --duration_ms=50 --json \
    2>"$TMP/msg.err") || fail "msg_bench $poll: $(cat "$TMP/msg.err")"
  n=0
  while IFS= read -r line; do
    [[ $line == "{"* ]] || continue
    n=$((n + 1))
    has_keys "$line" provider size rtt_p50_us rtt_p99_us raw_rtt_p50_us msgs_per_s poll ring_size \
      cores_awake
    case "$line" in *"\"poll\":\"$poll\""*) ;; *) fail "msg_bench line without poll $poll: $line" ;; esac
  done <<<"$out"
  [ "$n" -eq 2 ] || fail "msg_bench $poll printed $n JSON lines, not 2: $out"
done

# Bad flags: exit 2 and a message naming the flag.
for bin in "$FABRIC" "$MSG"; do
  "$bin" --provider=nonesuch --json >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "$bin --provider=nonesuch exited $rc, not 2"
  grep -q nonesuch "$TMP/err" || fail "$bin --provider=nonesuch said: $(cat "$TMP/err")"
  "$bin" --poll=sometimes >"$TMP/out" 2>"$TMP/err"
  rc=$?
  [ "$rc" -eq 2 ] || fail "$bin --poll=sometimes exited $rc, not 2"
  grep -q sometimes "$TMP/err" || fail "$bin --poll=sometimes said: $(cat "$TMP/err")"
  "$bin" --help >"$TMP/out" 2>&1 || true
  grep -q -- "--provider" "$TMP/out" || fail "$bin --help does not list --provider"
done

no_target "$FABRIC"
no_target "$MSG"
echo PASS
