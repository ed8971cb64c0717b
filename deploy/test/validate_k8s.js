// Validates rendered objects against the Kubernetes OpenAPI schemas
// (kubernetes-models, Kubernetes 1.27) and the Prometheus Operator's CRDs.
//   node validate_k8s.js RENDERED.json
// RENDERED.json is `helm-render --format json`. Prints one line per object;
// exits 1 if any object is invalid or of a kind no schema covers.
"use strict";
const fs = require("fs");

// apiVersion -> the module folder holding its kinds.
function modulePath(apiVersion, kind) {
  if (apiVersion === "monitoring.coreos.com/v1") {
    return `@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

function validate(object) {
  const { apiVersion, kind } = object;
  let Model;
  try {
    Model = require(modulePath(apiVersion, kind))[kind];
  } catch (e) {
    return `no schema for ${apiVersion} ${kind}`;
  }
  if (!Model) return `no schema for ${apiVersion} ${kind}`;
  try {
    new Model(object).validate();
  } catch (e) {
    return e.message;
  }
  return null;
}

const entries = JSON.parse(fs.readFileSync(process.argv[2], "utf8"));
if (entries.length === 0) {
  console.log("no objects rendered");
  process.exit(1);
}
let failures = 0;
for (const { source, object } of entries) {
  const name = `${object.kind}/${object.metadata && object.metadata.name} (${source})`;
  const error = validate(object);
  if (error) {
    failures++;
    console.log(`INVALID ${name}: ${error}`);
  } else {
    console.log(`valid   ${name}`);
  }
}
process.exit(failures ? 1 : 0);
