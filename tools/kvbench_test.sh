#!/usr/bin/env bash
# kvbench end to end with tiny sizes and durations: farm (one-sided GETs) and farm-rpc on a
# 3-node cluster on shm, memcached and Redis on Unix sockets (when installed), with JSON output
# checked for its keys and sanity (every point measured something, memory per item known);
# memcached-buf (buffered requests) alone, not measured at 1 in flight; one point on tcp;ofi_rxm
# against the peers over TCP, farm judged against memcached's better variant, farm's MultiGet by
# READs and by batched RPCs (--multi_get); the table; bad flags (exit 2) and a peer that cannot
# be reached (exit 1), each with a message (and no empty table after the failed target). Never
# asserts on timings. Every process the bench starts (nodes, memcached, redis-server) is its own
# to stop; the test checks that none is left.
set -u
BENCH=${1:-bazel-bin/tools/kvbench}
CLUSTER=${2:-}  # //tools:cluster, for the attached run
TMP=${TEST_TMPDIR:-$(mktemp -d)}
export TMPDIR=$TMP

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

tiny=(--keys=300 --threads=1,2 --in_flight=1,4 --duration_ms=250 --warmup_ms=20
      --read_ref_iters=200 --socket_ref_iters=200 --timeout_s=60 --load_threads=2)
keys=(target provider transport workload distribution threads in_flight ops_per_s p50_us p99_us
      p999_us bytes_per_item resident_per_item read_ref_p50_us socket_ref_p50_us schema tool commit host seed
      duration_ms warmup_ms cores_awake load_avg)

# A bench killed half-way (e.g. by this test's timeout) cannot stop the servers it started: on
# exit, stop any that a directory created during this test still names.
# The servers' directories go to a private short directory (Unix socket paths are limited), so
# another bench running at the same time cannot be mistaken for ours.
export BENCH_PEERS_TMP=$(mktemp -d /tmp/kvbt.XXXXXX)
cleanup() {
  local d pid
  for d in "$BENCH_PEERS_TMP"/bench_redis.* "$BENCH_PEERS_TMP"/bench_memcached.*; do
    [ -e "$d" ] || continue
    for pid in "$d"/*.pid; do [ -f "$pid" ] && kill "$(cat "$pid")" 2>/dev/null; done
    rm -rf "$d"
  done
  rm -rf "$BENCH_PEERS_TMP"
}
trap cleanup EXIT

# check_json OUT WANT_LINES TARGET...: every line has every key, positive throughput and memory
# per item, and each TARGET has lines. (A point's 250 ms leave room for a round delayed by a
# loaded machine: under load a farm PUT has taken tens of milliseconds.)
check_json() {
  local out=$1 want=$2
  shift 2
  local lines n key t
  lines=$(grep -c '^{' <<<"$out")
  [ "$lines" = "$want" ] || fail "expected $want JSON lines, got $lines:"$'\n'"$out"
  for key in "${keys[@]}"; do
    n=$(grep -c "\"$key\":" <<<"$out")
    [ "$n" = "$want" ] || fail "key $key is in $n of $want lines:"$'\n'"$out"
  done
  grep -q '"ops_per_s":0\.0,' <<<"$out" && fail "a point measured nothing:"$'\n'"$out"
  grep -q '"bytes_per_item":0\.0,' <<<"$out" && fail "a target reports no memory:"$'\n'"$out"
  grep -q '"p50_us":0\.000,' <<<"$out" && fail "a point has no latency:"$'\n'"$out"
  for t in "$@"; do
    grep -q "\"target\":\"$t\"" <<<"$out" || fail "no $t lines:"$'\n'"$out"
  done
}

have_peers=1
command -v memcached >/dev/null && command -v redis-server >/dev/null || have_peers=0

echo "== shm: farm, farm-rpc, memcached, redis; JSON"
targets=farm,farm-rpc
want_targets=(farm farm-rpc)
if [ $have_peers = 1 ]; then
  targets=farm,farm-rpc,memcached,redis
  want_targets=(farm farm-rpc memcached redis)
else
  echo "memcached or redis-server is not installed: farm only"
fi
out=$(timeout 240 "$BENCH" "${tiny[@]}" --provider=shm --nodes=3 --targets=$targets \
      --workloads=b,w --dists=uniform,zipf --json 2>"$TMP/shm.err")
rc=$?
[ $rc = 0 ] || fail "kvbench exited $rc: $(tail -20 "$TMP/shm.err")"
# 2 workloads (reads with updates, updates only) x 2 distributions x 2 thread counts x 2 in-flight
# counts per target.
check_json "$out" $((16 * ${#want_targets[@]})) "${want_targets[@]}"
# Every store started here has its processes' resident memory counted.
grep -q '"resident_per_item":0\.0,' <<<"$out" && fail "a target reports no resident memory:"$'\n'"$out"
grep -q '"target":"farm","provider":"shm","transport":"shm","workload":"ycsb-b"' <<<"$out" ||
  fail "no farm/shm ycsb-b line"
# farm's lines say how its MultiGet read (kAuto on shm: batches by RPC to the nodes with
# kv::kAutoMinBatch keys or more); no other target's do.
n=$(grep -c '"target":"farm",.*"multi_get":"rpc","multi_get_asked":"auto"' <<<"$out")
[ "$n" = 16 ] || fail "$n farm lines with MultiGet's path:"$'\n'"$out"
grep -q '"target":"farm-rpc",.*"multi_get"' <<<"$out" && fail "farm-rpc lines name a MultiGet path"
# Every target's reads were judged for read-your-writes (ycsb-b and w update, so some reads follow
# the reading thread's own update of the key).
for t in "${want_targets[@]}"; do
  grep -qE " $t \((shm|unix)\): [1-9][0-9]* reads judged .*none stale" "$TMP/shm.err" ||
    fail "$t: no reads judged for read-your-writes: $(grep judged "$TMP/shm.err")"
done
# The run's description; cores kept awake when the test may write /dev/cpu_dma_latency (root).
awake=false
[ -w /dev/cpu_dma_latency ] && awake=true
n=$(grep -cE '"schema":2,"tool":"kvbench","commit":"[^"]+","host":"[^"]+","seed":1,"duration_ms":250,"warmup_ms":20,"cores_awake":'$awake',' <<<"$out")
[ "$n" = $((16 * ${#want_targets[@]})) ] || fail "the run's description (cores_awake $awake) is in $n lines:"$'\n'"$out"
grep -q '"target":"farm".*"read_ref_p50_us":0\.000' <<<"$out" &&
  fail "farm lines lack fabric_bench's READ reference:"$'\n'"$out"
if [ $have_peers = 1 ]; then
  grep -q '"target":"memcached","provider":"shm","transport":"unix"' <<<"$out" ||
    fail "memcached did not run over a Unix socket"
  grep -q '"target":"redis","provider":"shm","transport":"unix"' <<<"$out" ||
    fail "redis did not run over a Unix socket"
  # The peers' transport reference: a Unix socket round trip, measured.
  grep -qE '"target":"(memcached|redis)".*"socket_ref_p50_us":0\.000' <<<"$out" &&
    fail "peer lines lack the socket reference:"$'\n'"$out"
fi
echo "ok: ${#want_targets[@]} targets x 16 points, keys present, every point measured"

echo "== memcached-buf: a round's noreply sets and its get in one write, none at 1 in flight"
if [ $have_peers = 1 ]; then
  out=$(timeout 120 "$BENCH" "${tiny[@]}" --provider=shm --targets=memcached-buf --workloads=a,w \
        --dists=uniform --json 2>"$TMP/buf.err")
  rc=$?
  [ $rc = 0 ] || fail "kvbench memcached-buf exited $rc: $(tail -20 "$TMP/buf.err")"
  # 2 workloads x 2 thread counts at 4 in flight; 1 in flight is not measured, with the reason.
  check_json "$out" 4 memcached-buf
  grep -q '"in_flight":1,' <<<"$out" && fail "memcached-buf measured at 1 in flight:"$'\n'"$out"
  grep -q "memcached-buf (unix): not measured at 1 in flight: .*nothing to buffer" "$TMP/buf.err" ||
    fail "memcached-buf does not say why 1 in flight is not measured: $(cat "$TMP/buf.err")"
  # The updates reached the server before the reads that follow them were answered.
  grep -qE " memcached-buf \(unix\): [1-9][0-9]* reads judged .*none stale" "$TMP/buf.err" ||
    fail "memcached-buf: no reads judged for read-your-writes: $(grep judged "$TMP/buf.err")"
  echo "ok: memcached-buf"
else
  echo "memcached is not installed: skipped"
fi

echo "== tcp;ofi_rxm against TCP, table"
tcp_targets=$targets
[ $have_peers = 1 ] && tcp_targets=$targets,memcached-buf
out=$(timeout 240 "$BENCH" "${tiny[@]}" --provider='tcp;ofi_rxm' --targets=$tcp_targets \
      --workloads=b --dists=zipf --threads=1 --in_flight=4 --poll=busy,adaptive \
      --multi_get=read,rpc,auto 2>&1)
rc=$?
[ $rc = 0 ] || fail "kvbench on tcp;ofi_rxm exited $rc: $out"
grep -qE '^target +transport +poll +workload' <<<"$out" || fail "no table header: $out"
# farm once per poll mode (a cluster each) and MultiGet path, the peers once; kAuto's rows say
# auto (batches only to nodes with kv::kAutoMinBatch of a round's keys: neither path alone).
for poll in busy adaptive; do
  for path in read rpc auto; do
    grep -qE "^farm/$path +tcp;ofi_rxm +$poll +ycsb-b +zipf +1 +4 " <<<"$out" ||
      fail "no farm row polling $poll with MultiGet by $path: $out"
  done
done
grep -qE '^  farm \(tcp;ofi_rxm\) +[0-9.]+ B, resident +[1-9][0-9.]* B' <<<"$out" ||
  fail "no farm memory per item: $out"
if [ $have_peers = 1 ]; then
  grep -qE '^memcached +tcp +- +ycsb-b' <<<"$out" || fail "no memcached row over TCP: $out"
  grep -qE '^memcached-buf +tcp +- +ycsb-b' <<<"$out" || fail "no memcached-buf row over TCP: $out"
  grep -qE '^redis +tcp +- +ycsb-b' <<<"$out" || fail "no redis row over TCP: $out"
  # farm against memcached's better variant at this point (the table's ops/s column).
  ranked=$(awk '$1 ~ /^memcached(-buf)?$/ && $2 == "tcp" {print $8, $1}' <<<"$out" | sort -n)
  best=$(tail -1 <<<"$ranked" | cut -d' ' -f2)
  [ "$(cut -d' ' -f1 <<<"$ranked" | uniq | wc -l)" = 1 ] && best='memcached(-buf)?'  # a tie
  for poll in busy adaptive; do
    for path in read rpc 'auto: batches to nodes serving >= 4 of the keys, READs to the others'; do
      line="ycsb-b zipf +1 thr +4 in flight: farm \(poll $poll, MultiGet $path\) [0-9]+ ops/s = [0-9.]+x"
      grep -qE "$line $best \(memcached's best\) over tcp" <<<"$out" ||
        fail "no target line against memcached's best ($best) for poll $poll, MultiGet $path: $out"
    done
  done
fi
echo "ok: tcp;ofi_rxm"

echo "== open loop (--rate), two runs with the targets taking turns (--repeat=2)"
rate_targets=farm
[ $have_peers = 1 ] && rate_targets=farm,redis
out=$(timeout 180 "$BENCH" "${tiny[@]}" --provider=shm --targets=$rate_targets --workloads=c \
      --dists=uniform --threads=1 --in_flight=2 --rate=2000 --repeat=2 --json 2>"$TMP/rate.err")
rc=$?
[ $rc = 0 ] || fail "kvbench --rate --repeat exited $rc: $(tail -20 "$TMP/rate.err")"
ntargets=$(tr ',' '\n' <<<"$rate_targets" | wc -l)
# 1 point per target per run, 2 runs, and a summary line per point; rounds of 2 (a round's
# latency, from its due time).
check_json "$out" $((3 * ntargets)) $(tr ',' ' ' <<<"$rate_targets")
n=$(grep -c '"latency_of":"round","loop":"open","rate":2000.0,"missed_ops":[0-9]*,' <<<"$out")
[ "$n" = $((3 * ntargets)) ] || fail "open-loop lines: $n:"$'\n'"$out"
for run in 1 2 0; do
  n=$(grep -c "\"repeat\":$run,\"repeats\":2" <<<"$out")
  [ "$n" = "$ntargets" ] || fail "$n lines of run $run:"$'\n'"$out"
done
n=$(grep -c '"repeat":0,"repeats":2,"ops_per_s_min":[0-9.]*,"ops_per_s_max":[0-9.]*,"p50_us_min"' <<<"$out")
[ "$n" = "$ntargets" ] || fail "summary lines without the spread:"$'\n'"$out"
# Taking turns: every target of run 1 before any of run 2.
order=$(grep -v '"repeat":0' <<<"$out" | grep -o '"target":"[a-z-]*"' | uniq | tr '\n' ' ')
want=$(for run in 1 2; do for t in $(tr ',' ' ' <<<"$rate_targets"); do printf '"target":"%s" ' "$t"; done; done)
[ "$order" = "$want" ] || fail "the runs do not take turns: $order (want $want)"
echo "ok: open loop, repeat"

echo "== attached to a running cluster (--cluster_config): its provider, without --provider"
if [ -n "$CLUSTER" ]; then
  "$CLUSTER" --nodes=2 --late_nodes=1 --provider='tcp;ofi_rxm' --self_check=false \
    --lock_memory=false --write_config="$TMP/attach.textproto" -- --kv --kv_buckets=256 \
    >"$TMP/attach.out" 2>&1 &
  cluster_pid=$!
  for _ in $(seq 1 300); do
    grep -q "^cluster ready" "$TMP/attach.out" 2>/dev/null && break
    kill -0 $cluster_pid 2>/dev/null || break
    sleep 0.1
  done
  grep -q "^cluster ready" "$TMP/attach.out" || fail "the cluster did not start: $(cat "$TMP/attach.out")"
  out=$(timeout 120 "$BENCH" --cluster_config="$TMP/attach.textproto" --targets=farm \
        --keys=200 --workloads=c --dists=uniform --threads=1 --in_flight=1 --duration_ms=100 \
        --warmup_ms=10 --read_ref_iters=50 --json 2>"$TMP/attach_bench.err")
  rc=$?
  [ $rc = 0 ] || fail "kvbench attached exited $rc: $(tail -20 "$TMP/attach_bench.err")"
  check_json "$out" 1 farm
  grep -q '"provider":"tcp;ofi_rxm"' <<<"$out" || fail "not the cluster's provider: $out"
  out=$(timeout 60 "$BENCH" --cluster_config="$TMP/attach.textproto" --provider=shm \
        --targets=farm --keys=10 2>&1)
  rc=$?
  [ $rc = 2 ] || fail "--provider=shm against a tcp;ofi_rxm cluster: exit $rc, not 2: $out"
  grep -q "runs tcp;ofi_rxm" <<<"$out" || fail "the mismatch is not explained: $out"
  kill -TERM $cluster_pid
  wait $cluster_pid
  echo "ok: attached"
fi

echo "== bad flags exit 2 with a message"
for bad in --targets=mysql --workloads=d --dists=normal --threads=0 --in_flight=0 \
           --in_flight=65 --keys=0 "--keys=5000 --key_size=3" --value_size=0 --zipf_theta=1.5 \
           --store_cpus=999 --client_cpus=x --provider=nope --no_such_flag --duration_ms=abc \
           --kv_bucket_bytes=100 --nodes=0 --poll=sleepy --rate=-1 --repeat=0 --multi_get=both; do
  # shellcheck disable=SC2086  # "--keys=5000 --key_size=3" is two flags
  timeout 30 "$BENCH" $bad >"$TMP/bad.out" 2>&1
  rc=$?
  [ $rc = 2 ] || fail "$bad: exit $rc, not 2: $(cat "$TMP/bad.out")"
  [ -s "$TMP/bad.out" ] || fail "$bad: no message"
done
grep -q "unknown target 'mysql'" < <(timeout 30 "$BENCH" --targets=mysql 2>&1) ||
  fail "--targets=mysql does not name the target"
echo "ok: bad flags"

echo "== a peer that cannot be reached: exit 1, the reason named"
fake="$TMP/fake_peers.sh"
cat >"$fake" <<'EOF'
#!/usr/bin/env bash
# Claims to start the server, starts nothing: the socket is not there.
case "$1" in
  start) d=$(mktemp -d); echo "DIR $d" ;;
  stop) rm -rf "$3" ;;
esac
EOF
for peer in memcached redis; do
  out=$(timeout 60 "$BENCH" --targets=$peer --peers_script="$fake" --keys=10 --workloads=c \
        --dists=uniform --threads=1 --in_flight=1 --duration_ms=10 2>&1)
  rc=$?
  [ $rc = 1 ] || fail "$peer unreachable: exit $rc, not 1: $out"
  grep -qiE "$peer.*(connect|unavailable)" <<<"$out" || fail "$peer unreachable: no reason: $out"
  # Its only target failed: no empty table, memory or targets after the error.
  grep -q "no results on provider shm: every target failed" <<<"$out" ||
    fail "$peer unreachable: the failure is not summed up: $out"
  ! grep -qE "^target +transport|memory per item|^targets \(issue" <<<"$out" ||
    fail "$peer unreachable: an empty table: $out"
done
echo "ok: unreachable peers"

timeout 30 "$BENCH" --help >"$TMP/help.out" 2>&1
grep -q -- "--in_flight" "$TMP/help.out" || fail "--help does not list --in_flight"
grep -q -- "--store_cpus" "$TMP/help.out" || fail "--help does not list --store_cpus"

sleep 0.5
left=$(pgrep -af -- "$TMP/kvbench\." | grep -v pgrep || true)
[ -z "$left" ] || fail "farm nodes left behind: $left"
for d in "$BENCH_PEERS_TMP"/bench_redis.* "$BENCH_PEERS_TMP"/bench_memcached.*; do
  [ -e "$d" ] || continue
  fail "the bench left $d behind"
done
echo PASS
