#!/usr/bin/env bash
# txn_bench end to end with tiny durations: a 3-node farm cluster on shm (every kind, both
# distributions) with JSON output, the same once against Redis when redis-server is installed,
# the human-readable table, the open loop (--rate) on farm, TATP on farm (and PostgreSQL when
# installed) with its audits, and bad flags (exit 2). Never asserts on timings. Every process the
# bench starts (nodes, redis-server) is its own to stop; the test checks that none is left.
set -u
BENCH=${1:-bazel-bin/tools/txn_bench}
TMP=${TEST_TMPDIR:-$(mktemp -d)}
export TMPDIR=$TMP

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

tiny=(--provider=shm --threads=1 --objects=64 --duration_ms=50 --warmup_ms=10 --msg_iters=0
      --socket_iters=200 --timeout_s=30 --poll=adaptive)
# Outside Bazel's sandbox (for PostgreSQL's user): a private /dev/shm of the bench's own, as the
# sandbox would give (libfabric's shm files are named after pids).
[ "$(id -u)" = 0 ] && tiny+=(--private_dev_shm)

# A bench killed half-way (e.g. by this test's timeout) cannot stop the redis-server it started:
# on exit, stop any that a directory created during this test still names.
redis_dirs_before=$(ls -d /tmp/bench_redis.* 2>/dev/null)
pg_dirs_before=$(ls -d /tmp/bench_pg.* 2>/dev/null)
cleanup() {
  local d
  for d in /tmp/bench_redis.*; do
    [ -f "$d/redis.pid" ] || continue
    grep -qxF "$d" <<<"$redis_dirs_before" && continue
    kill "$(cat "$d/redis.pid")" 2>/dev/null
    rm -rf "$d"
  done
}
trap cleanup EXIT

echo "== farm on shm, JSON"
out=$(timeout 120 "$BENCH" "${tiny[@]}" --targets=farm --json 2>"$TMP/farm.err")
rc=$?
[ $rc = 0 ] || fail "txn_bench exited $rc: $(tail -20 "$TMP/farm.err")"
lines=$(grep -c '"tx_per_s":' <<<"$out")
[ "$lines" = 8 ] || fail "expected 8 JSON points (4 kinds x 2 distributions), got $lines:"$'\n'"$out"
# One line for the cluster's lease: every node's heartbeats, none evicted, and the scheduling
# probe's record (it woke up at least 1 ms apart; steal time -1 where the kernel reports none).
grep -qE '^\{"target":"farm","kind":"lease",.*"lease_ms":3000,"nodes":3,"nodes_reported":3,"heartbeats":[1-9][0-9]*,.*"evictions":0,"probe_realtime":(true|false),"probe_s":[0-9.]+,"probe_gap_max_ms":([1-9][0-9]*)\.[0-9]+,"probe_gaps_over_5ms":[0-9]+,"probe_gaps_over_10ms":[0-9]+,"steal_ms":-?[0-9]+,"schema":2,"tool":"txn_bench",.*"cores_awake":(true|false),"load_avg":[0-9.]+\}$' <<<"$out" ||
  fail "no lease line with 3 nodes' heartbeats, no eviction and the probe's record:"$'\n'"$out"
for key in target provider kind threads tx_per_s p50_us p99_us abort_rate msg_rounds schema tool \
           commit host seed duration_ms warmup_ms cores_awake load_avg success_rate cpu_us_per_tx \
           tx_per_s_per_core msg_rounds_read_only placement poll loop rate missed_tx; do
  n=$(grep '"tx_per_s":' <<<"$out" | grep -c "\"$key\":")
  [ "$n" = 8 ] || fail "key $key is in $n of 8 points:"$'\n'"$out"
done
grep -q '"target":"farm","provider":"shm"' <<<"$out" || fail "no farm/shm line"
grep -q '"kind":"read_only".*"msg_rounds":0' <<<"$out" || fail "read_only should have 0 rounds"
grep -q '"kind":"bank".*"msg_rounds":2' <<<"$out" || fail "bank should have 2 rounds"
grep -q 'AUDIT .* ok' "$TMP/farm.err" || fail "no successful audit: $(tail -5 "$TMP/farm.err")"
n=$(grep -c '"txn_p99_us":[0-9.]*,"loop":"closed","rate":0\.0,"missed_tx":0,' <<<"$out")
[ "$n" = 8 ] || fail "$n of 8 points say the closed loop:"$'\n'"$out"
# The run's description: schema 2, this tool, the seed and window asked for; cores kept awake
# when the test may write /dev/cpu_dma_latency (root), else said to be left to idle.
awake=false
[ -w /dev/cpu_dma_latency ] && awake=true
n=$(grep -cE '"schema":2,"tool":"txn_bench","commit":"[^"]+","host":"[^"]+","seed":1,"duration_ms":50,"warmup_ms":10,"cores_awake":'$awake',' <<<"$out")
[ "$n" = 9 ] || fail "the run's description (cores_awake $awake) is in $n of 9 lines:"$'\n'"$out"
echo "ok: 8 farm points, keys present, audit ok"

echo "== table"
out=$(timeout 120 "$BENCH" "${tiny[@]}" --targets=farm --kinds=write_1 --dists=ycsb-zipf 2>&1)
rc=$?
[ $rc = 0 ] || fail "txn_bench (table) exited $rc: $out"
grep -qE '^target +f +transport +kind' <<<"$out" || fail "no table header: $out"
grep -qE '^farm +0 +shm +write_1 +ycsb-zipf ' <<<"$out" || fail "no write_1 row: $out"
echo "ok: table"

echo "== open loop (--rate) on farm: 1500 tx/s offered by the 3 clients together"
out=$(timeout 120 "$BENCH" "${tiny[@]}" --targets=farm --kinds=write_1 --dists=uniform \
      --duration_ms=200 --rate=1500 --json 2>"$TMP/rate.err")
rc=$?
[ $rc = 0 ] || fail "txn_bench --rate exited $rc: $(tail -20 "$TMP/rate.err")"
line=$(grep '"target":"farm",.*"kind":"write_1"' <<<"$out")
[ -n "$line" ] || fail "no write_1 line: $out"
# Every transaction due in the window is counted or missed (missed_tx: how many a loaded machine
# could not start, with a warning); some committed, and the audit adds up their increments.
grep -qE '"txn_p99_us":[0-9.]+,"loop":"open","rate":1500\.0,"missed_tx":[0-9]+,' <<<"$line" ||
  fail "no open-loop keys: $line"
grep -qE '"tx_per_s":[1-9]' <<<"$line" || fail "nothing committed in the open loop: $line"
grep -q 'AUDIT .* ok' "$TMP/rate.err" || fail "no successful audit: $(tail -5 "$TMP/rate.err")"
echo "ok: open loop"

echo "== farm with backups (f = 1): COMMIT-BACKUP's round, and the audit still adds up"
out=$(timeout 120 "$BENCH" "${tiny[@]}" --targets=farm --f=1 --kinds=bank --dists=uniform --json \
  2>"$TMP/f1.err")
rc=$?
[ $rc = 0 ] || fail "txn_bench --f=1 exited $rc: $(tail -20 "$TMP/f1.err")"
grep -q '"kind":"bank".*"f":1,.*"msg_rounds":3' <<<"$out" || fail "f=1 bank line: $out"
grep -q 'AUDIT .* ok' "$TMP/f1.err" || fail "no successful audit with f=1: $(tail -5 "$TMP/f1.err")"
echo "ok: f = 1"

echo "== farm's clients on a node of their own (--client_node): placement, clients, audit"
out=$(timeout 120 "$BENCH" "${tiny[@]}" --targets=farm --client_node --kinds=bank,write_1 \
  --dists=uniform --json 2>"$TMP/cn.err")
rc=$?
[ $rc = 0 ] || fail "txn_bench --client_node exited $rc: $(tail -20 "$TMP/cn.err")"
n=$(grep -c '"target":"farm",.*"threads":1,"clients":1,.*"placement":"client_node"' <<<"$out")
[ "$n" = 2 ] || fail "$n client-node lines, not 2: $out"
# The client node holds no objects: every commit sends messages, so the remote commits' p50 is
# every commit's.
grep -q '"kind":"write_1".*"remote_p50_us":0\.000' <<<"$out" && fail "no remote commits: $out"
grep -q '"nodes":4,"nodes_reported":4' <<<"$out" || fail "the lease line lacks the client node: $out"
grep -q 'AUDIT .* ok' "$TMP/cn.err" || fail "no successful audit: $(tail -5 "$TMP/cn.err")"
echo "ok: client node"

echo "== redis on a Unix socket"
if command -v redis-server >/dev/null; then
  out=$(timeout 120 "$BENCH" "${tiny[@]}" --targets=redis,redis-lua --kinds=bank --dists=uniform \
        --repeat=2 --json 2>"$TMP/redis.err")
  rc=$?
  [ $rc = 0 ] || fail "txn_bench --targets=redis,redis-lua exited $rc: $(tail -20 "$TMP/redis.err")"
  # WATCH/MULTI/EXEC in 2 rounds, the script in 1; the audit (the sum kept) passed for both.
  grep -q '"target":"redis","provider":"shm","transport":"unix","kind":"bank".*"msg_rounds":2' \
    <<<"$out" || fail "no redis line with 2 rounds: $out"
  grep -q '"target":"redis-lua","provider":"shm","transport":"unix","kind":"bank".*"msg_rounds":1' \
    <<<"$out" || fail "no redis-lua line with 1 round: $out"
  grep -q '"target":"redis-lua".*"abort_rate":0\.00000' <<<"$out" ||
    fail "a script never aborts: $out"
  # Two runs, the targets taking turns, then a median line per target with the spread.
  order=$(grep -o '"target":"[a-z-]*","provider":"shm","transport":"unix","kind":"bank".*"repeat":[12],' \
          <<<"$out" | grep -o '"target":"[a-z-]*"' | tr '\n' ' ')
  [ "$order" = '"target":"redis" "target":"redis-lua" "target":"redis" "target":"redis-lua" ' ] ||
    fail "the runs do not take turns: $order"
  n=$(grep -c '"repeat":0,"repeats":2,"tx_per_s_min":[0-9.]*,"tx_per_s_max":[0-9.]*,"p50_us_min"' <<<"$out")
  [ "$n" = 2 ] || fail "$n summary lines, not 2: $out"
  # The peers' transport reference, a Unix socket round trip, is on their lines.
  grep -q '"socket_rtt_p50_us":0\.000' <<<"$out" && fail "no socket reference: $out"
  for d in /tmp/bench_redis.*; do
    [ -e "$d" ] || continue
    grep -qxF "$d" <<<"$redis_dirs_before" || fail "the bench left $d behind"
  done
  echo "ok: redis"
else
  echo "redis-server is not installed: skipped that part"
fi

echo "== postgres on a Unix socket: prepared statements in a pipeline, and the function"
if ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  out=$(timeout 180 "$BENCH" "${tiny[@]}" --targets=postgres,postgres-fn --kinds=bank --dists=zipf \
        --json 2>"$TMP/pg.err")
  rc=$?
  [ $rc = 0 ] || fail "txn_bench --targets=postgres,postgres-fn exited $rc: $(tail -20 "$TMP/pg.err")"
  grep -q '"target":"postgres","provider":"shm","transport":"unix","kind":"bank".*"msg_rounds":2' \
    <<<"$out" || fail "no postgres line with 2 rounds: $out"
  grep -q '"target":"postgres-fn","provider":"shm","transport":"unix","kind":"bank".*"msg_rounds":1' \
    <<<"$out" || fail "no postgres-fn line with 1 round: $out"
  # Row locks taken in id order: the function's transfers wait, never abort.
  grep -q '"target":"postgres-fn".*"abort_rate":0\.00000' <<<"$out" ||
    fail "the function's transfers aborted: $out"
  for d in /tmp/bench_pg.*; do
    [ -e "$d" ] || continue
    grep -qxF "$d" <<<"$pg_dirs_before" || fail "the bench left $d behind"
  done
  echo "ok: postgres, postgres-fn"
else
  echo "PostgreSQL is not installed: skipped that part"
fi

echo "== TATP on farm$(ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && echo ' and postgres')"
targets=farm
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 && targets=farm,postgres
out=$(timeout 180 "$BENCH" "${tiny[@]}" --targets=$targets --kinds=tatp --dists=nurand \
      --subscribers=300 --duration_ms=300 --json 2>"$TMP/tatp.err")
rc=$?
[ $rc = 0 ] || fail "txn_bench --kinds=tatp exited $rc: $(tail -20 "$TMP/tatp.err")"
for target in ${targets//,/ }; do
  line=$(grep "\"target\":\"$target\",.*\"kind\":\"tatp\",\"dist\":\"nurand\"" <<<"$out")
  [ -n "$line" ] || fail "no $target tatp line: $out"
  # It committed transactions, some of which found nothing (TATP's success rate is about 75 %),
  # and its CPU time per transaction was measured.
  grep -qE '"tx_per_s":[1-9]' <<<"$line" || fail "$target committed no TATP transaction: $line"
  grep -qE '"success_rate":0\.[5-9]' <<<"$line" || fail "$target's TATP success rate: $line"
  grep -qE '"cpu_us_per_tx":[1-9]' <<<"$line" || fail "$target's CPU per transaction: $line"
done
# The audits: every subscriber's index entry, no call forwarding without its special facility,
# the rows the committed transactions added and removed.
grep -qE 'AUDIT tatp subscribers=300 index=ok orphans=0 call_forwardings=([0-9]+) expected=\1 .* ok' \
  "$TMP/tatp.err" || fail "no successful farm TATP audit: $(grep -i audit "$TMP/tatp.err")"
if [ $targets = farm,postgres ]; then
  grep -qE 'postgres: AUDIT tatp subscribers=300 misnumbered=0 orphans=0 call_forwardings=([0-9]+) expected=\1 .* ok' \
    "$TMP/tatp.err" || fail "no successful postgres TATP audit: $(grep -i audit "$TMP/tatp.err")"
fi
# Farm's writing transactions send 2 rounds, its read-only ones none; no objects were audited
# (no point of their kinds ran).
grep -qE '"target":"farm",.*"kind":"tatp",.*"msg_rounds":2,"msg_rounds_read_only":0,' <<<"$out" ||
  fail "farm's tatp rounds: $out"
if grep -q 'AUDIT sum' "$TMP/tatp.err"; then fail "a tatp-only run audited objects: $(grep AUDIT "$TMP/tatp.err")"; fi
echo "ok: tatp on $targets"

echo "== bad flags exit 2"
for bad in --threads=0 --kinds=write_3 --dists=normal --provider=nope --no_such_flag \
           --duration_ms=abc --targets=mysql --cpus=x --f=3 --f=x --lease_ms=5 --repeat=0 \
           "--client_node --active_nodes=1" --subscribers=0 \
           "--kinds=tatp --subscribers=121000" "--kinds=tatp --timeout_s=2 --subscribers=2001" \
           --rate=-1 --rate=nan --rate=inf --rate=1e10 --rate=0.5 --rate=x; do
  # shellcheck disable=SC2086  # "--client_node --active_nodes=1" (and the like) is two flags
  timeout 30 "$BENCH" $bad >"$TMP/bad.out" 2>&1
  rc=$?
  [ $rc = 2 ] || fail "$bad: exit $rc, not 2: $(cat "$TMP/bad.out")"
  [ -s "$TMP/bad.out" ] || fail "$bad: no message"
done
echo "ok: bad flags"

timeout 30 "$BENCH" --help >"$TMP/help.out" 2>&1
grep -q -- "--threads" "$TMP/help.out" || fail "--help does not list --threads"
grep -q -- "--rate" "$TMP/help.out" || fail "--help does not list --rate"

sleep 0.5
left=$(pgrep -f -- "$BENCH --role=node" || true)
[ -z "$left" ] || fail "node processes left behind: $left"
echo PASS
