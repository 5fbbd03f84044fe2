#!/usr/bin/env bash
# The main job: installs whatever is missing, builds, starts a local cluster of 3 symmetric node
# processes connected all-to-all, prints the one-sided READ/WRITE self-check table for every
# ordered pair and stops the cluster; then runs the example applications (examples/hello.cc, then
# examples/bank.cc: transactions) on 3 nodes. Extra arguments go to //tools:cluster (see --help) in
# every run, e.g.
#   ./run.sh --provider=shm
set -euo pipefail
cd "$(dirname "$0")"
third_party/install_deps.sh
bazel run //tools:cluster -- --nodes=3 --exit_after_check "$@"
bazel run //examples:hello_cluster -- --nodes=3 "$@"
exec bazel run //examples:bank_cluster -- --nodes=3 "$@"
