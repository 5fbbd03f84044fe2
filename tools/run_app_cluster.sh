#!/usr/bin/env bash
# Launches a local cluster of a farm application (the `_cluster` target of //:defs.bzl's farm_app):
#   run_app_cluster.sh CLUSTER_BINARY APP_BINARY [cluster flags...]
set -euo pipefail
cluster=$1
app=$2
shift 2
app_abs="$(cd "$(dirname "$app")" && pwd)/$(basename "$app")"
exec "$cluster" --node_binary="$app_abs" "$@"
