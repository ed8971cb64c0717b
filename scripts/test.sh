#!/usr/bin/env bash
# The test command: installs what is missing, builds everything and runs every
# test (unit, multi-process integration, end-to-end), then prints one line
# "N passed, N failed" and exits non-zero on any failure.
set -uo pipefail
cd "$(dirname "$0")/.."

scripts/setup.sh || { echo "0 passed, 1 failed"; exit 1; }

log=$(mktemp)
scripts/bazel.sh test //... --test_output=errors --test_summary=short "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
python3 scripts/summarize_tests.py "$log" "$rc"
