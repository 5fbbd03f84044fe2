#!/usr/bin/env bash
# Mutation testing: shows that the randomized checks catch protocol bugs, not only planted bad
# histories. Each mutant (platform/mutant.h) breaks one guarantee in a build that compiles the
# mutants in (`--config=mutants`, or the ASan build `--config=asan`) and is switched on at run time
# by FARM_MUTANT=<name>; the tests listed for it must then FAIL.
#
#   tests/mutants.sh                      every mutant once; last line "mutants: caught N of M"
#   tests/mutants.sh --runs 3             each mutant three times (each run must catch it)
#   tests/mutants.sh --only accept_torn   some mutants (comma-separated names)
#   tests/mutants.sh --config asan        in the ASan build (default: mutants)
#   tests/mutants.sh --config asan --no-baseline   .ci/run, after its ASan lane passed: that lane
#                                         ran the same binaries without a mutant
#   tests/mutants.sh --output_base DIR    Bazel's output base (a startup option; .ci/run's own)
#   tests/mutants.sh -- --test_output=errors   flags after -- go to every bazel command
#
# Steps: one build of all the listed tests with the chosen config; one run of them with no mutant,
# which must pass (otherwise a "catch" could be a flaky failure, and the script stops; skipped with
# --no-baseline, for a caller that has just seen them pass in the same build); then, per
# mutant, its tests with --test_env=FARM_MUTANT=<name>. A mutant is caught when Bazel says a test
# failed (exit status 3: the build succeeded, a test failed or timed out); a build error or any
# other status is not a catch. Test results are never taken from Bazel's cache. A mutant whose
# name appears nowhere in the code (no FARM_MUTANT("<name>") point) counts as surviving.
# Exit status: 0 if every mutant was caught in every run, 1 if one survived, 2 if the build or
# the run without mutants failed.
set -uo pipefail
cd "$(dirname "$0")/.."

# mutant  tests that must catch it (comma-separated) [Catch2 test case: only that one runs; a
#         comma in it separates names for Catch2, so such a name ends in a * before its comma;
#         tests@N runs them N times for each run of the mutant, for a randomized test that catches
#         it most of the time: any of the N failing catches it]
#                                                         what it breaks
mutants=(
  "skip_validate            //tests:txn_history_test"  # Commit skips VALIDATE of objects only read
  "skip_lock_version_check  //tests:txn_history_test"  # LOCK locks an object whatever its version
  "commit_first_owner_only  //tests:txn_history_test"  # COMMIT-PRIMARY reaches the first owner only
  "accept_torn              //txn:object_test,//tests:txn_test"  # a copy failing its check is accepted
  "kv_skip_miss_recheck     //tests:kv_linearizability_test"  # a KV miss is not re-checked
  "kv_skip_block_identity   //tests:kv_linearizability_test@3"  # overflow blocks' identity unchecked
  "kv_scan_by_bucket        //kv:kv_test Scan under concurrent writers returns every key present throughout*"  # Scan takes a step's buckets' keys, not its home buckets' keys: a key that moves back is missed
  "skip_commit_backup       //tests:replication_test with f = 1 every backup copy ends equal to its primary"  # no COMMIT-BACKUP: backups never get the writes (the whole test: 68 s)
  "backup_apply_older       //txn:backup_log_test"  # a backup applies an older write over a newer one
  "skip_array_backup        //tests:replication_test with f = 1 every backup copy ends equal to its primary"  # backups never get an object array (the whole test: 79 s under ASan, its new cases waiting 60 s for objects the backups never got)
  "skip_recovery_locks      //txn:backup_log_test,//tests:replication_test"  # a promoted copy does not lock kept records' objects (since recovering regions, replication_test alone rarely sees it: settlement mostly ends before activation)
  "reconnect_gives_up_at_once //platform:configuration_manager_test a member waits for a CM that took over and answers late"  # a member counts a CM that took over unreachable after one late answer, takes over and removes it
  "activate_without_acks    //platform:configuration_manager_test a promoted region serves only once every member applied the change*"  # a promoted region serves before every member applied the change
  "leave_without_release    //platform:configuration_manager_test a node that leaves goes once every other member applied*"  # a leaving node closes without waiting for the others to let it go
  "count_moved_reads        //platform:node_test a READ from a region whose primary moved does not count*"  # a READ that completes at a region's old primary after the move counts
  "activate_before_lease    //platform:configuration_manager_test a promoted region serves only once every member applied the change*"  # a promoted region serves while the failed primary's lease runs
  "promote_syncing_backup   //tests:replication_test a backup still copying its region is never promoted"  # a backup still copying its region (re-replication) is promoted
  "no_recovery_vote         //tests:replication_test a transaction seen committed stays committed when its coordinator and that owner fail"  # recovery commits only what a surviving owner committed (recovery_test catches it too)
  "backups_read_apart       //tests:replication_test a region promoted while a commit reads its copies loses no committed write"  # a commit reads a region's backups apart from its primary (in a later membership): its record goes to no backup
  "recover_answer_whole     //tests:replication_test a departed coordinator's recovery ends when the answers are longer than a message"  # a RECOVER answer goes in one message however long: refused past the limit, the recovery never ends
  "forget_truncations       //tests:replication_test a coordinator that fails between two truncations loses none of its writes"  # backups do not remember what they truncated
  "bound_ignores_unfinished //tests:replication_test a coordinator that fails between two truncations loses none of its writes"  # the truncation bound passes transactions not yet truncated everywhere
  "count_partial_records    //txn:backup_log_test"  # a COMMIT-BACKUP record missing parts counts in the vote
  "done_notice_once         //tests:runtime_test every node passes the done barrier when notices are refused once"  # an application's done notice that failed is not sent again
  "hand_off_fresh_copy      //tests:replication_test a region handed over to its backup and back keeps every committed write"  # the old primary of a region handed over gets an empty backup copy instead of its own memory
  "journal_skip_keep        //txn:backup_log_test"  # a kept COMMIT-BACKUP record is not journalled (lost when every node crashes)
  "cm_keeps_own_lease       //platform:configuration_manager_test a CM that cannot record a member's failure stops renewing its own node's lease"  # a CM cut off from the others and the store keeps its own node's lease
)

runs=1
only=""
config=mutants
baseline=1
output_base=""
bazel_flags=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --runs=*) runs=${1#*=}; shift ;;
    --only) only=$2; shift 2 ;;
    --only=*) only=${1#*=}; shift ;;
    --config) config=$2; shift 2 ;;
    --config=*) config=${1#*=}; shift ;;
    --no-baseline) baseline=0; shift ;;
    --output_base) output_base=$2; shift 2 ;;
    --output_base=*) output_base=${1#*=}; shift ;;
    --) shift; bazel_flags=("$@"); break ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "mutants.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
case $runs in ''|*[!0-9]*|0) echo "mutants.sh: --runs needs a positive number" >&2; exit 2 ;; esac
case $config in
  mutants|asan) ;;
  *) echo "mutants.sh: --config must be mutants or asan (builds that compile the mutants in)" >&2
     exit 2 ;;
esac

chosen=()
for m in "${mutants[@]}"; do
  read -r name _ <<<"$m"
  if [ -z "$only" ] || [[ ",$only," == *",$name,"* ]]; then chosen+=("$m"); fi
done
if [ ${#chosen[@]} = 0 ]; then
  echo "mutants.sh: no mutant named in --only '$only'" >&2
  exit 2
fi

# The tests of the chosen mutants, each once.
targets=()
for m in "${chosen[@]}"; do
  read -r _ tests _ <<<"$m"
  IFS=, read -r -a ts <<<"${tests%@*}"
  for t in "${ts[@]}"; do
    [[ " ${targets[*]} " == *" $t "* ]] || targets+=("$t")
  done
done

bazel() { command bazel ${output_base:+--output_base="$output_base"} "$@"; }
log=$(mktemp -d /tmp/farm-mutants.XXXXXX)
common=(--config="$config" "${bazel_flags[@]}")
testlogs=$(bazel info "${common[@]}" bazel-testlogs 2>/dev/null)
run=(--nocache_test_results --test_output=summary)
start=$SECONDS

echo "mutants: building ${targets[*]} with --config=$config"
if ! bazel build "${common[@]}" "${targets[@]}" >"$log/build.log" 2>&1; then
  tail -30 "$log/build.log"
  echo "mutants: the build failed (log: $log/build.log); no mutant can be judged"
  exit 2
fi

if [ "$baseline" = 1 ]; then
  echo "mutants: the same tests without a mutant must pass"
  if ! bazel test "${common[@]}" "${run[@]}" "${targets[@]}" >"$log/baseline.log" 2>&1; then
    grep -E "^//.*(FAILED|TIMEOUT|NO STATUS)" "$log/baseline.log"
    echo "mutants: the tests fail without a mutant (log: $log/baseline.log); a catch would mean nothing"
    exit 2
  fi
  echo "mutants: without a mutant all passed ($((SECONDS - start)) s so far)"
else
  echo "mutants: no run without a mutant (--no-baseline: the caller saw these tests pass)"
fi

caught=0
for m in "${chosen[@]}"; do
  read -r name tests case <<<"$m"
  repeat=()  # tests@N: each run of the mutant runs them N times; one failure catches it
  if [[ $tests == *@* ]]; then
    repeat=(--runs_per_test="${tests##*@}")
    tests=${tests%@*}
  fi
  IFS=, read -r -a ts <<<"$tests"
  only_case=()
  [ -z "$case" ] || only_case=(--test_arg="$case")
  if ! grep -rqF --include='*.cc' --include='*.h' "FARM_MUTANT(\"$name\")" platform txn kv api \
      messaging tools 2>/dev/null; then
    echo "mutant $name: SURVIVED: no FARM_MUTANT(\"$name\") point in the code"
    continue
  fi
  ok=0 how=""
  for r in $(seq 1 "$runs"); do
    t0=$SECONDS
    bazel test "${common[@]}" "${run[@]}" --notest_keep_going --test_env=FARM_MUTANT="$name" \
      "${only_case[@]}" "${repeat[@]}" "${ts[@]}" \
      >"$log/$name.$r.log" 2>&1
    rc=$?
    # A repeated test (tests@N) that fails stops the others: "FAIL: //t (run 1 of 3)", then
    # "//t NO STATUS".
    failing=$({
      grep -E "^//[^ ]+ +.*(FAILED|TIMEOUT)" "$log/$name.$r.log" | awk '{print $1}'
      grep -E "^FAIL: //" "$log/$name.$r.log" | awk '{print $2}'
    } | sort -u | tr '\n' ' ')
    for t in $failing; do  # keep the failing test's own log: what the mutant did
      p=${t#//}
      cp "$testlogs/${p/://}/test.log" "$log/$name.$r.$(basename "${p/://}").test.log" 2>/dev/null
    done
    if [ "$rc" = 3 ] && [ -n "$failing" ]; then
      ok=$((ok + 1))
      how+=" run $r: ${failing}($((SECONDS - t0)) s);"
    else
      how+=" run $r: NOT caught (bazel status $rc, log $log/$name.$r.log);"
    fi
  done
  if [ "$ok" = "$runs" ]; then
    caught=$((caught + 1))
    echo "mutant $name: caught in $ok of $runs runs:${how%;}"
  else
    echo "mutant $name: SURVIVED in $((runs - ok)) of $runs runs:${how%;}"
  fi
done
echo "mutants: done after $((SECONDS - start)) s; logs in $log"
echo "mutants: caught $caught of ${#chosen[@]}"
[ "$caught" = "${#chosen[@]}" ]
