# Sourced by the deploy tests: named test cases, each run in a subshell
# with `set -e`; failures print the case's output. `finish` writes JUnit XML
# (so scripts/test.sh counts cases, not targets) and sets the exit status.
# Also locates the runfiles, the source tree and the tools.

set -uo pipefail

RUNFILES="${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-herd}"
CASE_TMP="$(mktemp -d "${TEST_TMPDIR:-/tmp}/deploy-test.XXXXXX")"
HELM_RENDER="$RUNFILES/deploy/test/helm-render"
CHART="$RUNFILES/deploy/helm/herd"
TEST_DIR="$RUNFILES/deploy/test"
# The real checkout (runfiles are links into it): node_modules lives there.
SOURCE_ROOT="$(cd "$(dirname "$(readlink -f "$RUNFILES/deploy/test/package.json")")/../.." && pwd)"

_case_names=()
_case_results=()
_case_seconds=()

die() {
  echo "$*" >&2
  exit 1
}

# run_case NAME COMMAND...: runs COMMAND (usually a function) as one case.
run_case() {
  local name="$1"
  shift
  local log="$CASE_TMP/$name.log" start=$SECONDS
  # Not inside `if`: bash ignores set -e in a condition, even in a subshell.
  (set -e; "$@") >"$log" 2>&1
  local rc=$?
  _case_names+=("$name")
  _case_seconds+=($((SECONDS - start)))
  if [ "$rc" -eq 0 ]; then
    _case_results+=(pass)
    echo "PASS $name"
  else
    _case_results+=(fail)
    echo "FAIL $name (exit $rc)"
    sed 's/^/    /' "$log"
  fi
}

_xml_escape() {
  sed -e 's/&/\&amp;/g' -e 's/</\&lt;/g' -e 's/>/\&gt;/g' -e 's/"/\&quot;/g' | tr -d '\000-\010\013\014\016-\037'
}

finish() {
  local failures=0 i suite="${TEST_TARGET:-deploy_test}"
  for i in "${!_case_names[@]}"; do
    [ "${_case_results[$i]}" = fail ] && failures=$((failures + 1))
  done
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    {
      echo '<?xml version="1.0" encoding="UTF-8"?>'
      echo "<testsuites><testsuite name=\"$suite\" tests=\"${#_case_names[@]}\" failures=\"$failures\">"
      for i in "${!_case_names[@]}"; do
        printf '<testcase name="%s" classname="%s" time="%s">' "${_case_names[$i]}" "$suite" "${_case_seconds[$i]}"
        if [ "${_case_results[$i]}" = fail ]; then
          printf '<failure message="case failed">'
          _xml_escape <"$CASE_TMP/${_case_names[$i]}.log"
          printf '</failure>'
        fi
        echo '</testcase>'
      done
      echo '</testsuite></testsuites>'
    } >"$XML_OUTPUT_FILE"
  fi
  echo "${#_case_names[@]} cases, $failures failed"
  [ "$failures" -eq 0 ]
}

# render NAME ARGS...: renders the chart as JSON into $CASE_TMP/NAME.json.
render() {
  local name="$1"
  shift
  "$HELM_RENDER" --chart "$CHART" --format json "$@" >"$CASE_TMP/$name.json"
}
