#!/usr/bin/env bash
# Every herd binary's --version names the release the chart deploys
# (Chart.yaml appVersion, the images' tag): common/version.h and the chart
# must move together.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/test/testlib.sh"

app_version() {
  sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$CHART/Chart.yaml"
}

# version_matches_chart PROGRAM PATH: prints exactly "PROGRAM APPVERSION", exit 0.
version_matches_chart() {
  local expected got
  expected="$1 $(app_version)"
  [ "$expected" != "$1 " ] || die "no appVersion in $CHART/Chart.yaml"
  got="$("$RUNFILES/$2" --version)" || die "$1 --version exited with $?"
  [ "$got" = "$expected" ] || die "$1 --version printed '$got', expected '$expected'"
  echo "$got"
}

run_case coordinator_version version_matches_chart herd-coordinator coordinator/herd-coordinator
run_case worker_version version_matches_chart herd-worker worker/daemon/herd-worker
run_case trainer_version version_matches_chart herd-trainer worker/train/herd-trainer
run_case cli_version version_matches_chart herd client/herd
finish
