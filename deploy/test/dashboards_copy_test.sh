#!/usr/bin/env bash
# Helm reads only files inside the chart, so the chart keeps a copy of the
# repository's dashboards/ in deploy/helm/herd/dashboards/. This test reads
# both from the checkout (dashboards/ is not a Bazel package; the target is
# tagged "external" so Bazel never serves a cached result) and fails when
# they differ, and checks that the rendered ConfigMap holds exactly them.
source "${TEST_SRCDIR}/${TEST_WORKSPACE}/deploy/test/testlib.sh"

REPO_DASHBOARDS="$SOURCE_ROOT/dashboards"
CHART_DASHBOARDS="$SOURCE_ROOT/deploy/helm/herd/dashboards"

chart_copy_matches_repository() {
  ls "$REPO_DASHBOARDS"/*.json >/dev/null || die "no dashboards in $REPO_DASHBOARDS"
  # Only the JSON files are shipped; anything else in dashboards/ (rules,
  # notes) is not the chart's business.
  diff <(cd "$REPO_DASHBOARDS" && ls ./*.json) <(cd "$CHART_DASHBOARDS" && ls ./*.json) ||
    die "dashboard files differ; run: cp dashboards/*.json deploy/helm/herd/dashboards/"
  for file in "$REPO_DASHBOARDS"/*.json; do
    cmp "$file" "$CHART_DASHBOARDS/$(basename "$file")" ||
      die "$(basename "$file") differs; run: cp dashboards/*.json deploy/helm/herd/dashboards/"
  done
}

configmap_holds_the_dashboards() {
  "$HELM_RENDER" --chart "$SOURCE_ROOT/deploy/helm/herd" --format json --set auth.userToken=0123456789abcdef0123,auth.workerToken=fedcba9876543210fedc \
    >"$CASE_TMP/rendered.json"
  node - "$CASE_TMP/rendered.json" "$REPO_DASHBOARDS" <<'EOF'
const assert = require("assert/strict");
const fs = require("fs");
const path = require("path");
const [renderedPath, dir] = process.argv.slice(2);
const maps = JSON.parse(fs.readFileSync(renderedPath, "utf8"))
  .map((e) => e.object)
  .filter((o) => o.kind === "ConfigMap" && (o.metadata.labels || {}).grafana_dashboard === "1");
assert.equal(maps.length, 1, "one ConfigMap labelled grafana_dashboard=1");
const data = maps[0].data;
const files = fs.readdirSync(dir).filter((f) => f.endsWith(".json")).sort();
assert.deepEqual(Object.keys(data).sort(), files);
for (const file of files) {
  const text = fs.readFileSync(path.join(dir, file), "utf8");
  assert.equal(data[file], text, `${file}: the ConfigMap must hold the file byte for byte`);
  const dashboard = JSON.parse(data[file]);
  assert.ok(dashboard.title && Array.isArray(dashboard.panels) && dashboard.panels.length > 0, `${file}: a dashboard`);
  console.log(`${file}: ${dashboard.panels.length} panel(s), identical`);
}
EOF
}

run_case chart_copy_matches_repository chart_copy_matches_repository
run_case configmap_holds_the_dashboards configmap_holds_the_dashboards
finish
