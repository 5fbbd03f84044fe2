#!/usr/bin/env bash
# go_build.sh OUT SRC...: builds the Go program in the directory of go.mod (one of SRC) into OUT,
# offline: the module's dependencies come from its vendor/ directory (GOFLAGS=-mod=vendor,
# GOPROXY=off), and the Go build cache and GOPATH live in a temporary directory that is removed
# afterwards. Run by the genrule in BUILD; the sources are copied first because `go build` refuses
# to //go:embed the symlinks that Bazel's sandbox presents them as.
#
# The Go toolchain is the first of: `go` on PATH, /usr/local/go/bin/go, /usr/lib/go/bin/go
# (Debian's golang-go, which third_party/install_deps.sh installs when there is no other Go).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: go_build.sh OUT SRC... (SRC includes go.mod)" >&2
  exit 2
fi
out=$(realpath -m "$1")
shift
pkg=""
for f in "$@"; do
  [ "$(basename "$f")" = go.mod ] && pkg=$(dirname "$f")
done
[ -n "$pkg" ] || { echo "go_build.sh: no go.mod among the sources" >&2; exit 2; }

go=""
for c in "$(command -v go || true)" /usr/local/go/bin/go /usr/lib/go/bin/go; do
  if [ -n "$c" ] && [ -x "$c" ]; then
    go=$c
    break
  fi
done
if [ -z "$go" ]; then
  echo "go_build.sh: no Go toolchain found (looked for go on PATH, /usr/local/go/bin/go," \
    "/usr/lib/go/bin/go); third_party/install_deps.sh installs Debian's golang-go" >&2
  exit 1
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/go_build.XXXXXX")
cleanup() {
  chmod -R u+w "$work" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
for f in "$@"; do
  rel=${f#"$pkg"/}
  mkdir -p "$work/src/$(dirname "$rel")"
  cp -L "$f" "$work/src/$rel"
done
cd "$work/src"
env -i PATH=/usr/bin:/bin HOME="$work" TMPDIR="$work" GOPATH="$work/gopath" GOCACHE="$work/cache" \
  GOENV=off GOFLAGS=-mod=vendor GOPROXY=off GOSUMDB=off GONOSUMDB= GOTOOLCHAIN=local GOWORK=off \
  GO111MODULE=on CGO_ENABLED=0 "$go" build -trimpath -o "$work/out" .
cp "$work/out" "$out"
