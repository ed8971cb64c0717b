#!/usr/bin/env bash
# Builds a Go tool from Debian's Go and Debian's Go library sources
# (GOPATH mode over /usr/share/gocode): offline, nothing vendored.
#   build_go_tool.sh OUTPUT FILE.go...
set -euo pipefail
out="$1"
shift
command -v go >/dev/null || { echo "go is missing: run scripts/setup.sh" >&2; exit 1; }
# A fresh cache inside the output tree: actions may not write elsewhere.
cache="$out.gocache"
trap 'chmod -R u+w "$cache" 2>/dev/null; rm -rf "$cache"' EXIT
GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$PWD/$cache" GOFLAGS= CGO_ENABLED=0 \
  go build -trimpath -o "$out" "$@"
