// The Dockerfiles cannot be built here (no Docker engine), so this checks
// what the chart relies on in them: the programs the pods start are where
// the images put them, and the images' user is the one the pods run as.
//   node check_images.js RENDERED.json DOCKER_DIR
"use strict";
const assert = require("assert/strict");
const fs = require("fs");
const path = require("path");
const { Rendered, podSpec, container, flags } = require("./lib/rendered");

const [renderedPath, dockerDir] = process.argv.slice(2);
const r = new Rendered(renderedPath);

// The absolute paths an image installs with COPY, and its ENTRYPOINT and USER.
function image(file) {
  const text = fs.readFileSync(path.join(dockerDir, file), "utf8");
  const installed = new Set();
  for (const m of text.matchAll(/^COPY --from=build (.+)$/gm)) {
    const parts = m[1].trim().split(/\s+/);
    const dest = parts.pop();
    for (const src of parts) installed.add(dest.endsWith("/") ? dest + path.basename(src) : dest);
  }
  const entrypoint = JSON.parse(/^ENTRYPOINT (.+)$/m.exec(text)[1]);
  const user = /^USER (\d+):(\d+)$/m.exec(text);
  return { installed, entrypoint, uid: Number(user[1]), gid: Number(user[2]), text };
}

function checkPod(component, containerName, dockerfiles, extraBinaryFlags) {
  const workload = r.workload(component);
  const c = container(workload, containerName);
  const security = podSpec(workload).securityContext;
  for (const file of dockerfiles) {
    const img = image(file);
    assert.ok(img.installed.has(c.command[0]), `${file} does not install ${c.command[0]}`);
    assert.deepEqual(img.entrypoint, c.command, `${file}: ENTRYPOINT vs the pod's command`);
    for (const flag of extraBinaryFlags) {
      const program = flags(c.args).get(flag);
      assert.ok(img.installed.has(program), `${file} does not install ${program} (${flag})`);
    }
    assert.equal(img.uid, security.runAsUser, `${file}: USER vs runAsUser`);
    assert.equal(img.gid, security.runAsGroup, `${file}: USER group vs runAsGroup`);
    assert.match(img.text, new RegExp(`useradd --uid ${img.uid} `), `${file} creates user ${img.uid}`);
    assert.match(img.text, /^FROM debian:12 AS build$/m, `${file}: build stage`);
    assert.match(img.text, /scripts\/setup\.sh/, `${file}: packages from scripts/setup.sh`);
    assert.match(img.text, /^FROM debian:12-slim$/m, `${file}: slim runtime stage`);
    console.log(`${file}: provides ${c.command[0]} for the ${component} pod`);
  }
}

checkPod("coordinator", "coordinator", ["coordinator.Dockerfile"], []);
checkPod("worker", "worker", ["worker.Dockerfile", "worker-cuda.Dockerfile"], ["--trainer-binary"]);
const cli = image("cli.Dockerfile");
assert.deepEqual(cli.entrypoint, ["/usr/local/bin/herd"]);
assert.ok(cli.installed.has("/usr/local/bin/herd"));
console.log("cli.Dockerfile: provides /usr/local/bin/herd");
