// Prints what a container runtime needs to know about one rendered
// container, tab-separated: image, the command's program, runAsUser,
// runAsGroup and fsGroup (pod level, container level overriding).
//   node pod_runtime.js RENDERED.json COMPONENT CONTAINER
"use strict";
const { Rendered, podSpec, container } = require("./lib/rendered");

const [renderedPath, component, containerName] = process.argv.slice(2);
const workload = new Rendered(renderedPath).workload(component);
const c = container(workload, containerName);
const security = Object.assign({}, podSpec(workload).securityContext, c.securityContext);
for (const field of ["runAsUser", "runAsGroup", "fsGroup"]) {
  if (!Number.isInteger(security[field])) throw new Error(`${component}/${containerName}: no ${field}`);
}
if (!c.command || c.command.length !== 1) throw new Error(`${component}/${containerName}: expected command: [program]`);
console.log([c.image, c.command[0], security.runAsUser, security.runAsGroup, security.fsGroup].join("\t"));
