#!/usr/bin/env bash
# Runs every test: installs whatever is missing, then
#  1. `bazel test //...`: unit tests, multi-node tests on shm and tcp;ofi_rxm, and the
#     network-namespace test (as root);
#  2. the SoftiWARP lane: the multi-node tests again on the verbs provider, over a software RDMA
#     device in a QEMU guest (tests/softiwarp; needs root; FARM_SOFTIWARP=off skips it).
# Extra arguments go to `bazel test`. For .ci/run, Bazel's build events go to $FARM_BEP_FILE and
# the lane's output to $FARM_SOFTIWARP_LOG, and the lane runs the tests named in $FARM_SIW_AGAIN
# (comma-separated, from tests/softiwarp/project.tests) once more at its end.
set -uo pipefail
cd "$(dirname "$0")"
third_party/install_deps.sh || exit 1

bazel test //... --build_event_json_file="${FARM_BEP_FILE:-/tmp/farm-test-bep.json}" "$@"
rc=$?

siw_log=${FARM_SOFTIWARP_LOG:-/tmp/farm-test-softiwarp.log}
if [ "${FARM_SOFTIWARP:-on}" = off ]; then
  echo "SoftiWARP lane: skipped (FARM_SOFTIWARP=off)" | tee "$siw_log"
elif [ "$(id -u)" != 0 ]; then
  echo "SoftiWARP lane: skipped (it needs root for QEMU and apt)" | tee "$siw_log"
else
  tests/softiwarp/run.sh --tests tests/softiwarp/project.tests \
    ${FARM_SIW_AGAIN:+--again "$FARM_SIW_AGAIN"} 2>&1 | tee "$siw_log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit $rc
