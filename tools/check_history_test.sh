#!/usr/bin/env bash
# check_history's exit codes and output: 0 and "OK" for a strictly serializable history, 1 and the
# anomaly for a bad one, 2 for input it cannot check; --help works.
set -u
CHECK=${1:-bazel-bin/tools/check_history}
TMP=${TEST_TMPDIR:-$(mktemp -d)}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect RC PATTERN ARGS...: runs check_history ARGS, requires exit code RC and PATTERN (grep -E)
# in its output.
expect() {
  local want=$1 pattern=$2 out rc
  shift 2
  out=$(timeout 60 "$CHECK" "$@" 2>&1)
  rc=$?
  [ "$rc" = "$want" ] || fail "expected exit $want, got $rc from: check_history $*"$'\n'"$out"
  grep -qE -- "$pattern" <<<"$out" || fail "output of [check_history $*] lacks /$pattern/:"$'\n'"$out"
  echo "ok: exit $rc, /$pattern/ <- check_history $*"
}

cat >"$TMP/good.jsonl" <<'H'
{"client":1,"start":0,"end":100,"outcome":"committed","ops":[["r",7,0],["w",7,11,0]]}
{"client":2,"start":50,"end":150,"outcome":"committed","ops":[["r",7,0]]}

{"client":"c3","start":200,"end":300,"outcome":"committed","ops":[["r",7,11],["w",7,12,11]]}
{"client":1,"start":310,"end":320,"outcome":"aborted","ops":[["w",7,13,12]]}
H
# Line 3 reads x=0 although line 1's write of x=11 completed before it started.
cat >"$TMP/stale.jsonl" <<'H'
{"client":1,"start":0,"end":100,"outcome":"committed","ops":[["r",7,0],["w",7,11,0]]}

{"client":2,"start":200,"end":300,"outcome":"committed","ops":[["r",7,0]]}
H
cat >"$TMP/lost.jsonl" <<'H'
{"client":1,"start":0,"end":100,"outcome":"committed","ops":[["r",7,0],["w",7,11,0]]}
{"client":2,"start":10,"end":110,"outcome":"committed","ops":[["r",7,0],["w",7,12,0]]}
H
cat >"$TMP/malformed.jsonl" <<'H'
{"client":1,"start":0,"end":100,"outcome":"committed","ops":[]}
{"client":1,"start":0,"end":100,"outcome":"committed","ops":[["r",7]]}
H
cat >"$TMP/duplicate.jsonl" <<'H'
{"client":1,"start":0,"end":100,"outcome":"committed","ops":[["w",7,11,0]]}
{"client":2,"start":0,"end":100,"outcome":"aborted","ops":[["w",7,11,0]]}
H

expect 0 "^OK: 4 transactions, strictly serializable$" --history="$TMP/good.jsonl"
expect 0 "^OK: 4 transactions" --history=- <"$TMP/good.jsonl"
expect 0 "^OK: 0 transactions" --history=/dev/null
expect 1 "real-time violation: stale read" --history="$TMP/stale.jsonl"
expect 1 "T0 -rt-> T1|T1 -rw-> T0" --history="$TMP/stale.jsonl"
expect 1 "T1 \(line 3, client 2" --history="$TMP/stale.jsonl"
expect 1 "lost update: T0 and T1 both overwrote version 0 of key 7" --history="$TMP/lost.jsonl"
expect 2 "line 2: ops\[0\]" --history="$TMP/malformed.jsonl"
expect 2 "value 11 is written to key 7 twice" --history="$TMP/duplicate.jsonl"
expect 2 "cannot open" --history="$TMP/missing.jsonl"
expect 2 "--history is required"
expect 2 "unknown log level" --history="$TMP/good.jsonl" --log_level=loud
expect 1 "--history" --help  # absl exits 1 after printing help
echo PASSED
