#!/usr/bin/env bash
# `promtool check rules` and `promtool check config` must be clean: exit 0
# and no warnings (promtool prints lint findings but may still exit 0).
set -uo pipefail
dir="$(dirname "$0")"
[[ -f "$dir/herd-rules.yml" ]] || dir="${TEST_SRCDIR}/${TEST_WORKSPACE}/dashboards"
command -v promtool >/dev/null || { echo "promtool is missing: run scripts/setup.sh" >&2; exit 1; }
failed=0
check() {
  local output
  output=$(cd "$dir" && promtool "$@" 2>&1)
  local rc=$?
  echo "$output"
  if [[ $rc -ne 0 ]] || grep -qiE 'warn|lint|error' <<<"$output"; then
    echo "FAILED: promtool $* (exit $rc)" >&2
    failed=1
  fi
}
check check rules herd-rules.yml
# Also loads the rule files the example configuration names.
check check config prometheus.yml
exit $failed
