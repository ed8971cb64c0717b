// What the chart relies on in the Dockerfiles: the programs the pods start
// are where the images put them, the images' user is the one the pods run
// as; and what build.sh relies on: one runtime stage over the base, the
// binaries and the package list from its staged context, no build tools.
// (image_check.sh builds nothing; it checks the built images, on demand.)
//   node check_images.js RENDERED.json DOCKER_DIR
"use strict";
const assert = require("assert/strict");
const fs = require("fs");
const path = require("path");
const { Rendered, podSpec, container, flags } = require("./lib/rendered");

const [renderedPath, dockerDir] = process.argv.slice(2);
const r = new Rendered(renderedPath);

// The absolute paths an image installs with COPY from the staged bin/, and
// its ENTRYPOINT and USER.
function image(file) {
  const text = fs.readFileSync(path.join(dockerDir, file), "utf8");
  const installed = new Set();
  for (const m of text.matchAll(/^COPY (bin\/.+)$/gm)) {
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
    checkBuild(file, img.text);
    console.log(`${file}: provides ${c.command[0]} for the ${component} pod`);
  }
}

function checkBuild(file, text) {
  assert.match(text, /^ARG BASE=debian:12-slim$/m, `${file}: ARG BASE (build.sh passes its Debian 12 base)`);
  assert.equal((text.match(/^FROM /gm) || []).length, 1, `${file}: one stage`);
  assert.match(text, /^FROM \$\{BASE\}$/m, `${file}: FROM \${BASE}`);
  assert.match(text, /^COPY runtime-packages\.txt install_packages\.sh \/tmp\/$/m, `${file}: the staged package list`);
  assert.match(text, /^RUN \/tmp\/install_packages\.sh \/tmp\/runtime-packages\.txt /m, `${file}: installs the list`);
  for (const tool of [/bazel/i, /setup\.sh/, /\bg\+\+/, /\bgcc\b/, /-dev\b/]) {
    assert.doesNotMatch(text.replace(/^#.*$/gm, ""), tool, `${file}: no build tools in the image (${tool})`);
  }
}

checkPod("coordinator", "coordinator", ["coordinator.Dockerfile"], []);
checkPod("worker", "worker", ["worker.Dockerfile", "worker-cuda.Dockerfile"], ["--trainer-binary"]);
const cli = image("cli.Dockerfile");
assert.deepEqual(cli.entrypoint, ["/usr/local/bin/herd"]);
assert.ok(cli.installed.has("/usr/local/bin/herd"));
checkBuild("cli.Dockerfile", cli.text);
// build.sh checks these lists against ldd; the CUDA image's needs a CUDA
// LibTorch to derive, so it may be missing.
for (const name of ["coordinator", "worker", "cli"]) {
  const list = fs.readFileSync(path.join(dockerDir, "runtime-packages", `${name}.txt`), "utf8");
  assert.match(list, /^([a-z0-9][a-z0-9.+-]+\n)+$/, `runtime-packages/${name}.txt: one package name a line`);
}
console.log("cli.Dockerfile: provides /usr/local/bin/herd");
