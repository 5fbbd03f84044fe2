#!/usr/bin/env bash
# The main job: installs whatever is missing, builds, starts a local cluster of 3 symmetric node
# processes connected all-to-all, prints the one-sided READ/WRITE self-check table for every
# ordered pair, and stops the cluster. Extra arguments go to //tools:cluster (see --help), e.g.
#   ./run.sh --provider=shm            ./run.sh --exit_after_check=false   (keep it running)
set -euo pipefail
cd "$(dirname "$0")"
third_party/install_deps.sh
exec bazel run //tools:cluster -- --nodes=3 --exit_after_check "$@"
