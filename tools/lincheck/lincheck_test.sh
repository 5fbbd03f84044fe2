#!/usr/bin/env bash
# lincheck's verdicts, reports, visualizations and exit codes on the hand-written histories of
# testdata/ (ok_*: linearizable, exit 0; bad_*: not linearizable, exit 1, the report names the
# key), on variants of them that show the unknown-outcome cases are decided by the unknown
# operations, on malformed input (exit 2, the message names the line and field), and on a history
# too hard to finish in time (exit 3). The visualizations of the bad histories are left in
# $TEST_UNDECLARED_OUTPUTS_DIR (bazel-testlogs/tools/lincheck/lincheck_test/test.outputs/).
set -u
CHECK=${1:-bazel-bin/tools/lincheck/lincheck}
DATA=${2:-tools/lincheck/testdata}
TMP=${TEST_TMPDIR:-$(mktemp -d)}
OUTPUTS=${TEST_UNDECLARED_OUTPUTS_DIR:-$TMP/outputs}
mkdir -p "$OUTPUTS"
export TEST_UNDECLARED_OUTPUTS_DIR=$OUTPUTS
passed=0  # checks that held

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

# expect RC PATTERN ARGS...: runs lincheck ARGS, requires exit code RC and PATTERN (grep -E) in its
# output (standard output and error).
expect() {
  local want=$1 pattern=$2 out rc
  shift 2
  out=$(timeout 60 "$CHECK" "$@" 2>&1)
  rc=$?
  [ "$rc" = "$want" ] || fail "expected exit $want, got $rc from: lincheck $*"$'\n'"$out"
  grep -qE -- "$pattern" <<<"$out" || fail "output of [lincheck $*] lacks /$pattern/:"$'\n'"$out"
  echo "ok: exit $rc, /$pattern/ <- lincheck $*"
  passed=$((passed + 1))
}

# Usage.
expect 0 'Exit codes' --help
expect 2 'no history file given' --timeout=1s
expect 2 'flag provided but not defined: -bogus' --bogus "$DATA/ok_cas.json"
expect 2 'visualize must be failure, always or never' --visualize=sometimes "$DATA/ok_cas.json"

# Linearizable histories.
expect 0 '^OK: linearizable \(2 keys\)' "$DATA/ok_concurrent.json"
expect 0 '^OK: linearizable \(2 keys\)' "$DATA/ok_cas.json"
expect 0 '5 operations \(2 of unknown outcome; 1 read\(s\) among them left out\)' \
  "$DATA/ok_unknown_applied.json"
expect 0 '^OK: linearizable \(1 key\)' "$DATA/ok_unknown_not_applied.json"
# The atomic updates (incr, setxx, getset, append, exists; put-if-absent is a cas from null): the
# last append's length needs the unknown incr to have applied; without it the key fails.
expect 0 '^OK: linearizable \(2 keys\)' "$DATA/ok_atomic.json"
grep -v '"return": null, "op": "incr"' "$DATA/ok_atomic.json" >"$TMP/no_unknown_incr.json"
expect 1 'key "s": NOT LINEARIZABLE' --visualize=never "$TMP/no_unknown_incr.json"
expect 1 'length 2 needs a value of 1 bytes before, but the key is absent' --visualize=never \
  "$TMP/no_unknown_incr.json"
# getset's old value comes as "old" on its return line (its call line has the new "value").
printf '{"id": 0, "client": 1, "call": 1, "op": "getset", "key": "k", "value": "a"}\n{"id": 0, "return": 5, "found": false}\n{"id": 1, "client": 1, "call": 6, "op": "getset", "key": "k", "value": "b"}\n{"id": 1, "return": 9, "found": true, "old": "a"}\n' >"$TMP/getset.jsonl"
expect 0 '^OK: linearizable \(1 key\)' "$TMP/getset.jsonl"
# The journal format, one file per process; node 2 was killed with its put and cas pending, which
# explain what node 1 read. Without node 2's journal they are values never written.
expect 0 '5 operations \(2 of unknown outcome\) by 3 clients on 2 keys, from 2 files' \
  "$DATA/ok_journal_node1.jsonl" "$DATA/ok_journal_node2.jsonl"
expect 1 'NOT LINEARIZABLE: 2 of 2 keys: "j", "j2"' --visualize=never "$DATA/ok_journal_node1.jsonl"

# The unknown-outcome histories depend on their unknown operations: without the unknown put, the
# read of "new" is unexplained; with the unknown put returning (so it must have happened before
# the reads), the reads of "old" are.
grep -v '"return": null, "op": "put"' "$DATA/ok_unknown_applied.json" >"$TMP/no_unknown_put.json"
expect 1 'key "k": NOT LINEARIZABLE' --visualize=never "$TMP/no_unknown_put.json"
sed 's/"call": 1200, "return": null/"call": 1200, "return": 1250/' "$DATA/ok_unknown_not_applied.json" \
  >"$TMP/put_returned.json"
expect 1 'key "k": NOT LINEARIZABLE' --visualize=never "$TMP/put_returned.json"

# Non-linearizable histories: each names its key and the operation that cannot follow; the
# visualization goes to $TEST_UNDECLARED_OUTPUTS_DIR/lincheck_<name>.html.
expect_bad() {
  local name=$1 pattern=$2
  rm -f "$OUTPUTS/lincheck_$name.html"
  expect 1 "$pattern" "$DATA/$name.json"
  local html=$OUTPUTS/lincheck_$name.html
  [ -s "$html" ] || fail "no visualization $html for $name"
  grep -q '"Partitions"' "$html" || fail "$html holds no Porcupine visualization data"
}
expect_bad bad_stale_read 'NOT LINEARIZABLE: 1 of 2 keys: "stale"'
expect_bad bad_stale_read 'it needs the key to be "v1", but the key holds "v2"'
expect_bad bad_lost_update 'key "counter": NOT LINEARIZABLE \(3 operations\)'
expect_bad bad_lost_update 'ok=true needs the key to be "0", but the key holds "1"'
expect_bad bad_never_written 'key "ghost": NOT LINEARIZABLE'
expect_bad bad_never_written 'it needs the key to be "phantom"'
expect_bad bad_resurrected 'key "zombie": NOT LINEARIZABLE'
expect_bad bad_resurrected 'it needs the key to be "v", but the key is absent'
expect_bad bad_nonmonotonic 'key "mono": NOT LINEARIZABLE'
expect_bad bad_nonmonotonic 'get\(\) -> "old"'
expect_bad bad_unknown_unexplained 'NOT LINEARIZABLE: 2 of 2 keys: "early", "u"'
expect_bad bad_lost_incr 'key "hits": NOT LINEARIZABLE \(3 operations\)'
expect_bad bad_lost_incr 'value "1" needs the key to be "0" \(or absent, for 0\) before, but the key holds "1"'
expect_bad bad_incr_refused 'a sum needs the key to hold an integer \(or be absent\), but the key holds "007"'
expect_bad bad_append_length 'length 2 needs a value of 0 bytes before, but the key holds "ab"'
expect_bad bad_getset_old 'it needs the key to be absent before, but the key holds "v1"'
expect_bad bad_setxx_absent 'ok=true needs the key to be present, but it is absent'
expect_bad bad_unknown_unexplained 'cas\(null -> "b"\) -> \? \(outcome unknown\).*error: DEADLINE_EXCEEDED'
# A second run does not overwrite the first one's visualization.
expect 1 'lincheck_bad_stale_read_2.html' "$DATA/bad_stale_read.json"

# --html and --visualize.
expect 1 "visualization \(Porcupine, 1 key\): $TMP/stale.html" --html="$TMP/stale.html" "$DATA/bad_stale_read.json"
grep -q 'stale' "$TMP/stale.html" || fail "$TMP/stale.html lacks the key"
expect 0 '^OK' --html="$TMP/ok.html" "$DATA/ok_cas.json"
[ ! -e "$TMP/ok.html" ] || fail "a visualization was written for a linearizable history by default"
expect 0 "visualization \(Porcupine, 2 keys\): $TMP/ok.html" --visualize=always --html="$TMP/ok.html" "$DATA/ok_cas.json"
[ -s "$TMP/ok.html" ] || fail "--visualize=always wrote no $TMP/ok.html"
expect 1 'NOT LINEARIZABLE' --visualize=never --html="$TMP/never.html" "$DATA/bad_stale_read.json"
[ ! -e "$TMP/never.html" ] || fail "--visualize=never wrote a visualization"

# Malformed input: exit 2, naming the file, line and field.
printf '{"operations": [\n  {"client": 1, "call": 1, "return": 2, "op": "get", "key": "k"}\n]}\n' >"$TMP/m1.json"
expect 2 'm1.json:2: operation 0: get that returned needs field "found"' "$TMP/m1.json"
printf '{"operations": [\n{"client": 1, "call": 1, "return": 2, "op": "put", "key": "k", "value": "v"},\n\n  {"client": 1, "call": "3", "return": 4, "op": "put", "key": "k", "value": "v"}\n]}\n' >"$TMP/m2.json"
expect 2 'm2.json:4: operation 1: field "call" must be an integer' "$TMP/m2.json"
printf '{"operations": [\n{"client": 1, "call": 1, "return": 2, "op": "put", "key": "k", "value": "v"},\n{"client": 1, "call": 3, "ret' >"$TMP/m3.json"
expect 2 'm3.json:3: invalid JSON' "$TMP/m3.json"
printf '{"operations": [{"client": 1, "call": 1, "return": 2, "op": "inc", "key": "k"}]}' >"$TMP/m4.json"
expect 2 'm4.json:1: operation 0: field "op" must be one of get, put, del, cas, setxx, getset, append, exists, incr, got "inc"' "$TMP/m4.json"
printf '{"operations": [{"client": 1, "call": 1, "return": 2, "op": "incr", "key": "k", "delta": 1, "failed": false}]}' >"$TMP/m13.json"
expect 2 'incr with "failed": false needs field "value"' "$TMP/m13.json"
printf '{"operations": [{"client": 1, "call": 1, "return": 2, "op": "incr", "key": "k", "delta": 1.5, "failed": true}]}' >"$TMP/m14.json"
expect 2 'field "delta" must be an integer' "$TMP/m14.json"
printf '{"operations": [{"client": 1, "call": 1, "return": 2, "op": "getset", "key": "k", "value": "v", "found": true}]}' >"$TMP/m15.json"
expect 2 'getset with "found": true needs field "old"' "$TMP/m15.json"
printf '{"operations": [{"client": 1, "call": 5, "return": 2, "op": "del", "key": "k", "deleted": true}]}' >"$TMP/m5.json"
expect 2 '"return" 2 is before "call" 5' "$TMP/m5.json"
printf '{"operations": [{"client": 1, "call": 1, "retrun": 2, "return": null, "op": "del", "key": "k"}]}' >"$TMP/m6.json"
expect 2 'unexpected field\(s\) retrun for del' "$TMP/m6.json"
printf '{"operations": [{"client": 1, "call": 1, "return": null, "op": "cas", "key": "k", "expected": null, "value": "v", "ok": true}]}' >"$TMP/m7.json"
expect 2 'outcome fields are not allowed on an operation of unknown outcome' "$TMP/m7.json"
printf '{"operations": [{"client": 1, "call": 1, "return": 2, "op": "put", "key": "k"}]}' >"$TMP/m8.json"
expect 2 'put needs field "value"' "$TMP/m8.json"
printf '{"operations": [{"client": 1, "call": 1, "op": "put", "key": "k", "value": "v"}]}' >"$TMP/m9.json"
expect 2 'missing field "return" \(null for an operation of unknown outcome\)' "$TMP/m9.json"
printf '{"id": 0, "client": 1, "call": 1, "op": "get", "key": "k"}\n{"id": 1, "return": 5, "found": false}\n' >"$TMP/m10.jsonl"
expect 2 'm10.jsonl:2: return of id 1, which has no call line before it' "$TMP/m10.jsonl"
printf '{"id": 0, "client": 1, "call": 1, "op": "get", "key": "k"}\n{"id": 0, "return": 5, "found": "no"}\n' >"$TMP/m11.jsonl"
expect 2 'm11.jsonl:1: id 0 \(returned on line 2\): field "found" must be true or false, got "no"' "$TMP/m11.jsonl"
# A journal whose process died while writing its last line: that line is left out with a note
# (a torn call line: the operation was never issued; a torn return line: its outcome is unknown).
printf '{"id": 0, "client": 1, "call": 1, "op": "put", "key": "k", "value": "v"}\n{"id": 0, "return": 5}\n{"id": 1, "client": 1, "call": 6, "op": "get", "key": "k"}\n{"id": 1, "return": 9, "fo' >"$TMP/torn.jsonl"
expect 0 'note: .*torn.jsonl: left out the last line, 4, which is cut short' "$TMP/torn.jsonl"
printf '{"id": 0, "client": 1, "call": 1, "op": "put", "key": "k", "value": "v"}\n{"id": 0, "ret\n{"id": 1, "client": 1, "call": 6, "op": "get", "key": "k"}\n' >"$TMP/m12.jsonl"
expect 2 'm12.jsonl:2: invalid JSON' "$TMP/m12.jsonl"
: >"$TMP/empty.json"
expect 2 'empty.json: empty file' "$TMP/empty.json"
expect 2 'cannot read history: .*no-such-file.json' "$TMP/no-such-file.json"
# Two files that use the same client id for overlapping operations.
expect 2 'client 1 runs two operations at once: .*bad_lost_update.json:2 \[1000, 1100\] and .*bad_unknown_unexplained.json:2' "$DATA/bad_lost_update.json" "$DATA/bad_unknown_unexplained.json"

# A history whose check cannot finish in time: 24 concurrent puts, then a read of a value none of
# them wrote; Porcupine must try every order of the puts (16 take ~1.5 s) before saying no.
{
  echo '{"operations": ['
  for i in $(seq 1 24); do
    echo "{\"client\": $i, \"call\": 1000, \"return\": 2000, \"op\": \"put\", \"key\": \"hard\", \"value\": \"v$i\"},"
  done
  echo '{"client": 0, "call": 3000, "return": 3001, "op": "get", "key": "hard", "found": true, "value": "none"},'
  echo '{"client": 0, "call": 4000, "return": 4001, "op": "get", "key": "easy", "found": false}'
  echo ']}'
} >"$TMP/hard.json"
expect 3 'UNKNOWN: the check of 1 of 2 keys did not finish within --timeout=1s \("hard"\); the other keys are linearizable' \
  --timeout=1s "$TMP/hard.json"

echo "PASSED: all $passed checks"
