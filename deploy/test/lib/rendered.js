// Lookups over the objects `helm-render --format json` produced, shared by
// the chart checks and the pod simulation.
"use strict";
const fs = require("fs");

class Rendered {
  constructor(path) {
    this.objects = JSON.parse(fs.readFileSync(path, "utf8")).map((entry) => entry.object);
  }

  all(kind) {
    return this.objects.filter((o) => o.kind === kind);
  }

  find(kind, name) {
    return this.objects.find((o) => o.kind === kind && o.metadata.name === name);
  }

  get(kind, name) {
    const object = this.find(kind, name);
    if (!object) throw new Error(`no ${kind}/${name} rendered`);
    return object;
  }

  // The workload of a component (app.kubernetes.io/component label).
  workload(component) {
    const found = this.objects.filter(
      (o) => ["Deployment", "StatefulSet"].includes(o.kind) && labels(o)["app.kubernetes.io/component"] === component
    );
    if (found.length !== 1) throw new Error(`expected one ${component} workload, found ${found.length}`);
    return found[0];
  }
}

function labels(object) {
  return (object.metadata && object.metadata.labels) || {};
}

// True when every matchLabels pair of `selector` is among `podLabels`.
function selects(matchLabels, podLabels) {
  const pairs = Object.entries(matchLabels || {});
  return pairs.length > 0 && pairs.every(([k, v]) => podLabels[k] === v);
}

function podSpec(workload) {
  return workload.spec.template.spec;
}

function container(workload, name) {
  const found = podSpec(workload).containers.find((c) => c.name === name);
  if (!found) throw new Error(`${workload.metadata.name} has no container ${name}`);
  return found;
}

// "--flag=value" / "--flag" arguments as a Map flag -> value (true when bare).
function flags(args) {
  const map = new Map();
  for (const arg of args) {
    if (!arg.startsWith("--")) throw new Error(`not a --flag argument: ${arg}`);
    const eq = arg.indexOf("=");
    const name = eq < 0 ? arg : arg.slice(0, eq);
    if (map.has(name)) throw new Error(`flag given twice: ${name}`);
    map.set(name, eq < 0 ? true : arg.slice(eq + 1));
  }
  return map;
}

// The volume and mount that hold an absolute path in a container.
function mountFor(workload, containerName, path) {
  const c = container(workload, containerName);
  const mount = (c.volumeMounts || [])
    .filter((m) => path === m.mountPath || path.startsWith(m.mountPath.replace(/\/?$/, "/")))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  if (!mount) return null;
  const volume = podSpec(workload).volumes.find((v) => v.name === mount.name);
  return { mount, volume, relative: path.slice(mount.mountPath.length).replace(/^\//, "") };
}

module.exports = { Rendered, labels, selects, podSpec, container, flags, mountFor };
