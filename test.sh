#!/usr/bin/env bash
# Runs every test: installs whatever is missing, then `bazel test //...` (unit tests, multi-node
# tests on shm and tcp;ofi_rxm, network-namespace tests when run as root).
# Bazel's build events go to $FARM_BEP_FILE (default: a file in /tmp) for .ci/run to count.
set -uo pipefail
cd "$(dirname "$0")"
third_party/install_deps.sh || exit 1
bep=${FARM_BEP_FILE:-/tmp/farm-test-bep.json}
bazel test //... --build_event_json_file="$bep" "$@"
