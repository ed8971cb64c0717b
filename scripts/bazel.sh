#!/usr/bin/env bash
# Runs Bazel with herd's cache settings: a disk cache shared by every clone
# on this machine, so a fresh checkout does not recompile unchanged code.
set -euo pipefail
CACHE="${HERD_BAZEL_CACHE:-$HOME/.cache/herd-bazel}"
mkdir -p "$CACHE"
cmd="$1"; shift
exec bazel "$cmd" --disk_cache="$CACHE" "$@"
