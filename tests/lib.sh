# Helpers shared by the project's shell tests. Source it; it sets `set -u` and defines:
#   bin NAME        path of //tools:NAME (Bazel runfiles, or bazel-bin when run by hand)
#   fail MSG        print MSG and exit 1
#   expect_fail RC_WANT PATTERN -- CMD...   run CMD with a timeout, require exit code RC_WANT
#                   (or any non-zero for "nz") and PATTERN (grep -E) in its output
#   skip REASON     the test cannot run here: print "FARM_TEST_SKIPPED: REASON" and exit 0
#                   (.ci/count_results.py counts the target as skipped, not passed)
set -u

_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
_root=$(cd "$_here/.." && pwd)
TMP=${TEST_TMPDIR:-$(mktemp -d)}
mkdir -p "$TMP"

bin() {
  local name=$1
  for p in "${TEST_SRCDIR:-/nonexistent}/${TEST_WORKSPACE:-farm}/tools/$name" \
           "$_root/bazel-bin/tools/$name"; do
    if [ -x "$p" ]; then echo "$p"; return 0; fi
  done
  echo "cannot find tools/$name; build it first" >&2
  return 1
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

skip() {
  echo "FARM_TEST_SKIPPED: $*"
  exit 0
}

# expect_fail WANT PATTERN -- CMD...  (WANT: exact exit code, or "nz" for any non-zero)
expect_fail() {
  local want=$1 pattern=$2
  shift 3
  local out rc
  out=$(timeout 60 "$@" 2>&1)
  rc=$?
  if [ "$rc" = 124 ]; then fail "timed out (a hang): $*"; fi
  if [ "$want" = nz ]; then
    [ "$rc" != 0 ] || fail "expected a non-zero exit from: $*"$'\n'"$out"
  else
    [ "$rc" = "$want" ] || fail "expected exit $want, got $rc from: $*"$'\n'"$out"
  fi
  if ! grep -qE -- "$pattern" <<<"$out"; then
    fail "output of [$*] lacks /$pattern/:"$'\n'"$out"
  fi
  echo "ok: exit $rc, /$pattern/ <- $*"
}

# Fails if a process whose command line contains $1 is still alive.
expect_no_process() {
  local left
  left=$(pgrep -af -- "$1" | grep -v pgrep || true)
  [ -z "$left" ] || fail "processes left behind:"$'\n'"$left"
}
