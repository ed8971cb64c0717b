// Asserts what worker labels and groups render to:
//   node check_worker_groups.js RENDERED.json
// for the values of chart_render_test.sh's worker_labels_and_groups: worker.labels
// {pool: a100}, worker.replicas 1, groups east (2 pods, zone us-east-1a, label
// site=us-east) and west (3 pods, zone us-west-2b, labels zone=w2, pool=h100).
"use strict";
const assert = require("assert/strict");
const { Rendered, selects, podSpec, container } = require("./lib/rendered");

const r = new Rendered(process.argv[2]);
const sets = Object.fromEntries(r.all("StatefulSet").map((s) => [s.metadata.name, s]));
assert.deepEqual(Object.keys(sets).sort(), ["herd-worker", "herd-worker-east", "herd-worker-west"]);

// Every --label of a StatefulSet's worker container, in order.
function labelArgs(set) {
  return container(set, "worker").args.filter((a) => a.startsWith("--label=")).map((a) => a.slice("--label=".length));
}

assert.equal(sets["herd-worker"].spec.replicas, 1);
assert.deepEqual(labelArgs(sets["herd-worker"]), ["pool=a100"]);
assert.equal((podSpec(sets["herd-worker"]).nodeSelector || {})["topology.kubernetes.io/zone"], undefined);

// A group's zone pins its pods to that zone and labels them with it.
assert.equal(sets["herd-worker-east"].spec.replicas, 2);
assert.deepEqual(labelArgs(sets["herd-worker-east"]), ["pool=a100", "site=us-east", "zone=us-east-1a"]);
assert.equal(podSpec(sets["herd-worker-east"]).nodeSelector["topology.kubernetes.io/zone"], "us-east-1a");

// A group's own labels win over worker.labels and over its zone's.
assert.equal(sets["herd-worker-west"].spec.replicas, 3);
assert.deepEqual(labelArgs(sets["herd-worker-west"]), ["pool=h100", "zone=w2"]);
assert.equal(podSpec(sets["herd-worker-west"]).nodeSelector["topology.kubernetes.io/zone"], "us-west-2b");

// Each group's StatefulSet selects its own pods only; all share the headless
// Service (pod DNS) and the worker token's id prefix (RELEASE-herd-worker-*).
for (const [name, set] of Object.entries(sets)) {
  assert.equal(set.spec.serviceName, "herd-worker", name);
  assert.ok(selects(set.spec.selector.matchLabels, set.spec.template.metadata.labels), name);
  for (const [other, otherSet] of Object.entries(sets)) {
    if (other === name || name === "herd-worker") continue;
    assert.ok(!selects(set.spec.selector.matchLabels, otherSet.spec.template.metadata.labels), `${name} selects ${other}'s pods`);
  }
  assert.ok(name.startsWith("herd-worker"), name);
}
console.log("check_worker_groups: ok");
