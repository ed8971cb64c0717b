// Asserts what the rendered chart must do, beyond schema validity.
//   node check_chart.js SCENARIO RENDERED.json [key=value...]
// SCENARIO: default | gpu | tls | existing-secret | monitoring | ha-external
// | ha-etcd | etcd-tls | etcd-auth. The key=value pairs are the facts the scenario expects
// (userToken=..., gpus=..., replicas=...).
"use strict";
const assert = require("assert/strict");
const crypto = require("crypto");
const { Rendered, labels, selects, podSpec, container, flags, mountFor } = require("./lib/rendered");

const [scenario, renderedPath, ...facts] = process.argv.slice(2);
const expected = Object.fromEntries(facts.map((f) => [f.slice(0, f.indexOf("=")), f.slice(f.indexOf("=") + 1)]));
const r = new Rendered(renderedPath);
const coordinator = r.workload("coordinator");
const worker = r.workload("worker");
const coordinatorArgs = flags(container(coordinator, "coordinator").args);
const workerArgs = flags(container(worker, "worker").args);
const workerContainer = container(worker, "worker");

function podLabels(workload) {
  return workload.spec.template.metadata.labels;
}

// The Secret volume a file argument reads from: {secretName, key}.
function secretFileSource(workload, containerName, file) {
  const held = mountFor(workload, containerName, file);
  assert.ok(held, `${file} is on no volume`);
  assert.ok(held.volume.secret, `${file} is not on a Secret volume`);
  const items = held.volume.secret.items || [];
  const item = items.find((i) => i.path === held.relative);
  return { secretName: held.volume.secret.secretName, key: item ? item.key : held.relative, items };
}

function checkCommonLabels() {
  for (const o of r.objects) {
    const l = labels(o);
    for (const key of ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version",
      "app.kubernetes.io/managed-by", "helm.sh/chart"]) {
      assert.ok(l[key], `${o.kind}/${o.metadata.name} lacks label ${key}`);
    }
  }
}

function checkSecurity(workload, containerName) {
  // A StatefulSet's claim templates are volumes of its pods too.
  const claimed = (workload.spec.volumeClaimTemplates || []).map((t) => t.metadata.name);
  const spec = podSpec(workload);
  const name = workload.metadata.name;
  assert.equal(spec.securityContext.runAsNonRoot, true, `${name}: runAsNonRoot`);
  assert.ok(spec.securityContext.runAsUser > 0, `${name}: runAsUser must not be root`);
  assert.equal(spec.securityContext.seccompProfile.type, "RuntimeDefault");
  assert.equal(spec.automountServiceAccountToken, false, `${name}: automountServiceAccountToken`);
  const sc = container(workload, containerName).securityContext;
  assert.equal(sc.allowPrivilegeEscalation, false, `${name}: allowPrivilegeEscalation`);
  assert.equal(sc.readOnlyRootFilesystem, true, `${name}: readOnlyRootFilesystem`);
  assert.deepEqual(sc.capabilities.drop, ["ALL"], `${name}: capabilities`);
  const tmp = mountFor(workload, containerName, "/tmp/x");
  // (mountFor looks among spec.volumes; claim templates are not there.)
  assert.ok(tmp && tmp.volume.emptyDir, `${name}: /tmp must be a writable emptyDir`);
  // Every mount has a volume and every volume is mounted.
  const mounted = new Set(container(workload, containerName).volumeMounts.map((m) => m.name));
  const volumes = new Set([...spec.volumes.map((v) => v.name), ...claimed]);
  assert.deepEqual([...mounted].sort(), [...volumes].sort(), `${name}: volumes vs mounts`);
}

// Where the coordinators keep their state: "etcd://..." or undefined (SQLite).
const store = coordinatorArgs.get("--store");

function checkCoordinator() {
  assert.equal(coordinator.kind, "Deployment");
  if (!store) assert.equal(coordinator.spec.replicas, 1, "one coordinator: SQLite has one writer");
  // SQLite: never two on one database; etcd: standbys are never Ready, so a
  // rolling update would wait for them forever.
  assert.equal(coordinator.spec.strategy.type, "Recreate");
  assert.ok(selects(coordinator.spec.selector.matchLabels, podLabels(coordinator)));
  const c = container(coordinator, "coordinator");
  const grpcPort = c.ports.find((p) => p.name === "grpc").containerPort;
  const metricsPort = c.ports.find((p) => p.name === "metrics").containerPort;
  assert.equal(coordinatorArgs.get("--listen"), `0.0.0.0:${grpcPort}`);
  assert.equal(coordinatorArgs.get("--metrics-listen"), `0.0.0.0:${metricsPort}`);
  for (const probe of [c.readinessProbe, c.livenessProbe]) {
    assert.equal(probe.grpc.port, grpcPort, "probes call the gRPC health service on the API port");
  }
  // Ready only while leading (the check of ""), alive while running (the
  // check of herd.live, which a standby answers too).
  assert.ok([undefined, ""].includes(c.readinessProbe.grpc.service), "readiness asks whether it leads");
  assert.equal(c.livenessProbe.grpc.service, "herd.live", "liveness must not restart standbys");
  // The Service reaches the named ports, and only coordinator pods.
  const service = r.get("Service", coordinator.metadata.name);
  assert.ok(selects(service.spec.selector, podLabels(coordinator)));
  assert.ok(!selects(service.spec.selector, podLabels(worker)));
  assert.ok(!service.spec.publishNotReadyAddresses, "the Service reaches only the Ready (leading) coordinator");
  assert.notEqual(service.spec.clusterIP, "None");
  assert.deepEqual(service.spec.ports.map((p) => [p.name, p.targetPort]).sort(), [["grpc", "grpc"], ["metrics", "metrics"]]);
  if (store) {
    checkEtcdStore(c, grpcPort);
  } else {
    // State on a PVC, writable.
    const state = mountFor(coordinator, "coordinator", coordinatorArgs.get("--state-dir"));
    assert.ok(state.volume.persistentVolumeClaim, "--state-dir must be on a PVC");
    assert.ok(!state.mount.readOnly);
    r.get("PersistentVolumeClaim", state.volume.persistentVolumeClaim.claimName);
    for (const flag of ["--etcd-prefix", "--etcd-lease-seconds", "--advertise"]) assert.ok(!coordinatorArgs.has(flag), flag);
  }
  if (scenario !== "etcd-tls" && expected.tls !== "true") {
    for (const flag of ["--etcd-cacert", "--etcd-cert", "--etcd-key"]) {
      assert.ok(!coordinatorArgs.has(flag), `${flag} without coordinator.store.etcd.tls`);
    }
    assert.ok(!podSpec(coordinator).volumes.some((v) => v.name === "etcd-tls"), "no etcd TLS volume");
  }
  if (scenario !== "etcd-auth") {
    for (const flag of ["--etcd-user", "--etcd-password-file"]) {
      assert.ok(!coordinatorArgs.has(flag), `${flag} without coordinator.store.etcd.auth`);
    }
    assert.ok(!podSpec(coordinator).volumes.some((v) => v.name === "etcd-auth"), "no etcd auth volume");
  }
  checkSecurity(coordinator, "coordinator");
}

// Coordinators on etcd: no state volume, a prefix of their own, and each
// names its pod IP to callers while it leads (what standbys pass on).
function checkEtcdStore(c, grpcPort) {
  assert.ok(!coordinatorArgs.has("--state-dir"), "--state-dir and --store exclude each other");
  assert.ok(!podSpec(coordinator).volumes.some((v) => v.name === "state"), "no state volume with etcd");
  const claims = r.all("PersistentVolumeClaim").map((p) => p.metadata.name);
  assert.ok(!claims.some((name) => name.endsWith("-state")), `no state PVC with etcd: ${claims}`);
  assert.equal(coordinatorArgs.get("--etcd-prefix"), `/herd/${expected.namespace || "default"}/${expected.releaseName || "herd"}/`);
  assert.ok(Number(coordinatorArgs.get("--etcd-lease-seconds")) >= 2);
  assert.equal(coordinatorArgs.get("--advertise"), `$(POD_IP):${grpcPort}`);
  const env = Object.fromEntries((c.env || []).map((e) => [e.name, e]));
  assert.equal(env.POD_IP.valueFrom.fieldRef.fieldPath, "status.podIP");
  assert.equal(coordinator.spec.replicas, Number(expected.replicas));
}

// The chart's own etcd: members that find each other by their stable names,
// the coordinators given every member, and no one else let in.
function checkOwnEtcd() {
  const etcd = r.workload("etcd");
  assert.equal(etcd.kind, "StatefulSet");
  assert.equal(etcd.spec.replicas, Number(expected.etcdMembers));
  assert.equal(etcd.spec.podManagementPolicy, "Parallel", "members start together to form a quorum");
  assert.ok(selects(etcd.spec.selector.matchLabels, podLabels(etcd)));
  const headless = r.get("Service", etcd.spec.serviceName);
  assert.equal(headless.spec.clusterIP, "None");
  assert.equal(headless.spec.publishNotReadyAddresses, true, "members resolve each other before they are Ready");
  assert.ok(selects(headless.spec.selector, podLabels(etcd)));
  assert.ok(!selects(headless.spec.selector, podLabels(coordinator)));
  const e = container(etcd, "etcd");
  const args = flags(e.args);
  const env = Object.fromEntries((e.env || []).map((v) => [v.name, v]));
  assert.equal(args.get("--name"), "$(POD_NAME)");
  assert.equal(env.POD_NAME.valueFrom.fieldRef.fieldPath, "metadata.name");
  const port = (name) => e.ports.find((p) => p.name === name).containerPort;
  const namespace = expected.namespace || "default";
  const host = (i) => `${etcd.metadata.name}-${i}.${headless.metadata.name}.${namespace}.svc`;
  const members = [...Array(etcd.spec.replicas).keys()];
  assert.equal(args.get("--initial-cluster"),
    members.map((i) => `${etcd.metadata.name}-${i}=http://${host(i)}:${port("peer")}`).join(","));
  assert.equal(args.get("--initial-advertise-peer-urls"), `http://$(POD_NAME).${headless.metadata.name}.${namespace}.svc:${port("peer")}`);
  assert.equal(args.get("--advertise-client-urls"), `http://$(POD_NAME).${headless.metadata.name}.${namespace}.svc:${port("client")}`);
  assert.equal(args.get("--listen-client-urls"), `http://0.0.0.0:${port("client")}`);
  assert.equal(args.get("--experimental-enable-lease-checkpoint"), "true", "a Raft leader change must not reset the leader's lease");
  // The coordinators are given every member.
  assert.equal(store, "etcd://" + members.map((i) => `${host(i)}:${port("client")}`).join(","));
  // Data on each member's own claim, at the data dir.
  const dataDir = args.get("--data-dir");
  const mount = e.volumeMounts.find((m) => dataDir.startsWith(m.mountPath.replace(/\/?$/, "/")));
  assert.ok(mount && etcd.spec.volumeClaimTemplates.some((t) => t.metadata.name === mount.name), "--data-dir on a claim template");
  assert.equal(e.readinessProbe.httpGet.path, "/health");
  assert.ok(e.livenessProbe.tcpSocket, "a member without a quorum is not restarted for it");
  checkSecurity(etcd, "etcd");
  // Drains keep a quorum up.
  const [budget] = r.all("PodDisruptionBudget").filter((b) => selects(b.spec.selector.matchLabels, podLabels(etcd)));
  assert.ok(budget, "a PodDisruptionBudget for the members");
  assert.equal(budget.spec.minAvailable, Math.floor(etcd.spec.replicas / 2) + 1, "a quorum stays up");
  // Only coordinators reach the client port, only members the peer port.
  const policy = r.all("NetworkPolicy").find((p) => selects(p.spec.podSelector.matchLabels, podLabels(etcd)));
  assert.ok(policy, "etcd has a NetworkPolicy");
  for (const rule of policy.spec.ingress) {
    assert.ok(rule.from && rule.from.length > 0, "no rule may admit everyone");
    for (const from of rule.from) {
      assert.ok(from.podSelector && !from.namespaceSelector, "this namespace's pods only");
      const admitsCoordinators = selects(from.podSelector.matchLabels, podLabels(coordinator));
      const admitsMembers = selects(from.podSelector.matchLabels, podLabels(etcd));
      assert.ok(admitsCoordinators || admitsMembers, "only coordinators and members");
      assert.ok(!selects(from.podSelector.matchLabels, podLabels(worker)), "workers never reach etcd");
      const ports = rule.ports.map((p) => p.port);
      if (admitsCoordinators) assert.deepEqual(ports, ["client"], "coordinators: the client port only");
    }
  }
}

function checkWorkers() {
  assert.equal(worker.kind, "StatefulSet");
  assert.ok(selects(worker.spec.selector.matchLabels, podLabels(worker)));
  const headless = r.get("Service", worker.spec.serviceName);
  assert.equal(headless.spec.clusterIP, "None", "the workers' Service must be headless");
  assert.equal(headless.spec.publishNotReadyAddresses, true);
  assert.ok(selects(headless.spec.selector, podLabels(worker)));
  assert.ok(!selects(headless.spec.selector, podLabels(coordinator)));
  // Peers reach a worker at its pod IP; its id is the (stable) pod name.
  const env = Object.fromEntries((workerContainer.env || []).map((e) => [e.name, e]));
  assert.equal(workerArgs.get("--listen"), "$(POD_IP)");
  assert.equal(env.POD_IP.valueFrom.fieldRef.fieldPath, "status.podIP");
  assert.equal(workerArgs.get("--worker-id"), "$(POD_NAME)");
  assert.equal(env.POD_NAME.valueFrom.fieldRef.fieldPath, "metadata.name");
  assert.match(workerArgs.get("--metrics-listen"), /^\$\(POD_IP\):\d+$/);
  // Probes: readiness asks the gRPC health service (SERVING while registered).
  const healthPort = workerContainer.ports.find((p) => p.name === "health").containerPort;
  assert.equal(workerArgs.get("--health-listen"), `0.0.0.0:${healthPort}`);
  assert.equal(workerContainer.readinessProbe.grpc.port, healthPort);
  assert.equal(workerContainer.livenessProbe.tcpSocket.port, "health");
  // --coordinator comes from the ConfigMap and names the coordinator Service.
  assert.equal(workerArgs.get("--coordinator"), "$(HERD_COORDINATOR)");
  const configName = workerContainer.envFrom[0].configMapRef.name;
  const address = r.get("ConfigMap", configName).data.HERD_COORDINATOR;
  const grpcPort = r.get("Service", coordinator.metadata.name).spec.ports.find((p) => p.name === "grpc").port;
  assert.equal(address, `${coordinator.metadata.name}.${expected.namespace || "default"}.svc:${grpcPort}`);
  assert.ok(mountFor(worker, "worker", workerArgs.get("--work-dir")).volume.emptyDir);
  // Workers get their own token, never the coordinator's auth file.
  assert.notEqual(
    secretFileSource(worker, "worker", workerArgs.get("--token-file")).secretName,
    secretFileSource(coordinator, "coordinator", coordinatorArgs.get("--auth-file")).secretName);
  // Checkpoints: one shared claim in both, at the advertised root.
  const root = r.get("ConfigMap", configName).data.HERD_CHECKPOINT_ROOT;
  const inWorker = mountFor(worker, "worker", root + "/x");
  const inCoordinator = mountFor(coordinator, "coordinator", root + "/x");
  assert.equal(inWorker.volume.persistentVolumeClaim.claimName, inCoordinator.volume.persistentVolumeClaim.claimName);
  const claim = r.get("PersistentVolumeClaim", inWorker.volume.persistentVolumeClaim.claimName);
  assert.ok(claim.spec.accessModes.includes("ReadWriteMany"), "workers share the checkpoint volume");
  // A stopping pod drains: its SIGTERM makes the worker leave its jobs at a
  // step boundary, and the grace period leaves room for that and the stop.
  const drain = Number(workerArgs.get("--drain-timeout-seconds"));
  assert.ok(drain > 0, "workers drain on SIGTERM");
  assert.ok(podSpec(worker).terminationGracePeriodSeconds > drain + Number(workerArgs.get("--trainer-kill-grace-seconds")),
    "the grace period covers the drain and the trainers' stop");
  checkSecurity(worker, "worker");
}

function checkNetworkPolicies() {
  const coordinatorPolicy = r.all("NetworkPolicy").find((p) => selects(p.spec.podSelector.matchLabels, podLabels(coordinator)));
  const workerPolicy = r.all("NetworkPolicy").find((p) => selects(p.spec.podSelector.matchLabels, podLabels(worker)));
  assert.ok(coordinatorPolicy && workerPolicy, "both components have a NetworkPolicy");
  for (const policy of [coordinatorPolicy, workerPolicy]) {
    assert.deepEqual(policy.spec.policyTypes, ["Ingress"]);
    for (const rule of policy.spec.ingress) assert.ok(rule.from && rule.from.length > 0, "no rule may admit everyone");
  }
  const ruleFor = (policy, port) => policy.spec.ingress.find((rule) => (rule.ports || []).some((p) => p.port === port));
  // gRPC: workers and labelled clients; nothing else.
  const grpc = ruleFor(coordinatorPolicy, "grpc");
  assert.ok(grpc.from.some((f) => f.podSelector && selects(f.podSelector.matchLabels, podLabels(worker)) && !f.namespaceSelector));
  assert.ok(grpc.from.some((f) => f.podSelector && selects(f.podSelector.matchLabels, { "herd-client": "true" })));
  assert.ok(!grpc.from.some((f) => f.podSelector && selects(f.podSelector.matchLabels, {})));
  // Metrics: only from the scraper's namespace, on both.
  for (const policy of [coordinatorPolicy, workerPolicy]) {
    const metrics = ruleFor(policy, "metrics");
    assert.deepEqual(metrics.from, [{ namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": "monitoring" } } }]);
  }
  // Worker data ports (any): from the other workers only.
  const data = workerPolicy.spec.ingress.filter((rule) => !rule.ports);
  assert.equal(data.length, 1);
  assert.equal(data[0].from.length, 1);
  assert.ok(selects(data[0].from[0].podSelector.matchLabels, podLabels(worker)));
  assert.ok(!selects(data[0].from[0].podSelector.matchLabels, podLabels(coordinator)));
  assert.equal(data[0].from[0].namespaceSelector, undefined, "data ports: this namespace's workers only");
}

function secretText(name, key) {
  return Buffer.from(r.get("Secret", name).data[key], "base64").toString();
}

// The coordinator reads the auth file, the workers their own token; with
// tokens in values, the auth file holds only their hashes and scopes the
// worker token to this release's worker pods, and no pod gets the users'.
function checkCredentials(authSecret, workerSecret, userToken, workerToken) {
  const auth = secretFileSource(coordinator, "coordinator", coordinatorArgs.get("--auth-file"));
  assert.deepEqual([auth.secretName, auth.key], [authSecret, "auth"]);
  assert.ok(!coordinatorArgs.has("--token-file"));
  const token = secretFileSource(worker, "worker", workerArgs.get("--token-file"));
  assert.deepEqual([token.secretName, token.key], [workerSecret, "token"]);
  if (userToken === undefined) return;
  const sha256 = (text) => crypto.createHash("sha256").update(text).digest("hex");
  const file = secretText(authSecret, "auth");
  assert.match(file, new RegExp(`^\\S+ user sha256:${sha256(userToken)}$`, "m"));
  assert.match(file, new RegExp(`^workers worker sha256:${sha256(workerToken)} ${worker.metadata.name}-\\*$`, "m"));
  assert.ok(!file.includes(userToken) && !file.includes(workerToken), "the auth file holds hashes, not tokens");
  assert.equal(secretText(workerSecret, "token"), workerToken);
  const userSecret = `${expected.release || "herd"}-user-token`;
  assert.equal(secretText(userSecret, "token"), userToken);
  for (const w of [coordinator, worker]) {
    assert.ok(!podSpec(w).volumes.some((v) => v.secret && v.secret.secretName === userSecret), "no pod holds the users' token");
  }
}

function checkCpuWorkers() {
  assert.equal(workerArgs.get("--device"), "cpu");
  assert.ok(!workerArgs.has("--gpus"));
  assert.match(workerContainer.image, /^herd-worker:/);
  const resources = JSON.stringify(workerContainer.resources);
  assert.ok(!resources.includes("nvidia.com/gpu"), "CPU workers request no GPU");
}

const scenarios = {
  default() {
    assert.equal(store, undefined, "SQLite by default");
    assert.equal(r.all("StatefulSet").filter((s) => labels(s)["app.kubernetes.io/component"] === "etcd").length, 0);
    checkCpuWorkers();
    const release = expected.release || "herd";
    checkCredentials(`${release}-auth`, `${release}-worker-token`, expected.userToken, expected.workerToken);
    assert.ok(!coordinatorArgs.has("--tls-cert") && !workerArgs.has("--tls-ca"), "no TLS by default");
    for (const w of [coordinator, worker]) {
      assert.equal(w.spec.template.metadata.annotations["prometheus.io/scrape"], "true");
    }
    assert.equal(r.all("ServiceMonitor").length, 0);
    checkNetworkPolicies();
  },
  gpu() {
    const count = Number(expected.gpus);
    // The GPUs join the configured requests and limits; nothing else moves.
    assert.deepEqual(workerContainer.resources, {
      requests: { cpu: "1", memory: "2Gi", "nvidia.com/gpu": count },
      limits: { memory: "8Gi", "nvidia.com/gpu": count },
    });
    assert.equal(workerArgs.get("--device"), "cuda");
    assert.equal(workerArgs.get("--gpus"), [...Array(count).keys()].join(","));
    assert.match(workerContainer.image, /^herd-worker-cuda:/);
    const spec = podSpec(worker);
    assert.ok(spec.tolerations.some((t) => t.key === "nvidia.com/gpu" && t.operator === "Exists"));
    assert.equal(spec.nodeSelector[expected.nodeLabel.split("=")[0]], expected.nodeLabel.split("=")[1]);
    const shm = mountFor(worker, "worker", "/dev/shm/x");
    assert.equal(shm.volume.emptyDir.medium, "Memory", "NCCL needs a real /dev/shm");
  },
  tls() {
    const server = ["--tls-cert", "--tls-key", "--tls-ca"].map((f) => secretFileSource(coordinator, "coordinator", coordinatorArgs.get(f)));
    assert.deepEqual(server.map((s) => [s.secretName, s.key]),
      [[expected.secret, "tls.crt"], [expected.secret, "tls.key"], [expected.secret, "ca.crt"]]);
    assert.equal(coordinatorArgs.get("--tls-require-client-cert"), true);
    const ca = secretFileSource(worker, "worker", workerArgs.get("--tls-ca"));
    assert.deepEqual([ca.secretName, ca.key], [expected.secret, "ca.crt"]);
    assert.deepEqual(ca.items.map((i) => i.key), ["ca.crt"], "workers must not get the server key");
    const client = ["--tls-cert", "--tls-key"].map((f) => secretFileSource(worker, "worker", workerArgs.get(f)));
    assert.deepEqual(client.map((s) => [s.secretName, s.key]), [[expected.clientSecret, "tls.crt"], [expected.clientSecret, "tls.key"]]);
  },
  "existing-secret"() {
    assert.equal(r.all("Secret").length, 0, "no Secret when one exists already");
    checkCredentials(expected.authSecret, expected.workerSecret);
  },
  "ha-external"() {
    // Your etcd: the coordinators get its endpoints; the chart runs none.
    assert.equal(store, "etcd://" + expected.endpoints);
    assert.equal(r.all("StatefulSet").filter((s) => labels(s)["app.kubernetes.io/component"] === "etcd").length, 0);
    assert.ok(coordinator.spec.replicas >= 2);
  },
  // Your etcd over TLS: the files come from the Secret, read-only, and stay
  // with the coordinators.
  "etcd-tls"() {
    assert.ok(store.startsWith("etcd://"), "TLS to etcd needs the etcd store");
    const ca = secretFileSource(coordinator, "coordinator", coordinatorArgs.get("--etcd-cacert"));
    assert.deepEqual([ca.secretName, ca.key], [expected.secret, "ca.crt"]);
    if (expected.clientCert === "true") {
      const pair = ["--etcd-cert", "--etcd-key"].map((f) => secretFileSource(coordinator, "coordinator", coordinatorArgs.get(f)));
      assert.deepEqual(pair.map((s) => [s.secretName, s.key]), [[expected.secret, "tls.crt"], [expected.secret, "tls.key"]]);
    } else {
      assert.ok(!coordinatorArgs.has("--etcd-cert") && !coordinatorArgs.has("--etcd-key"), "no client certificate");
      assert.deepEqual(ca.items.map((i) => i.key), ["ca.crt"], "only the CA is mounted");
    }
    const held = mountFor(coordinator, "coordinator", coordinatorArgs.get("--etcd-cacert"));
    assert.equal(held.mount.readOnly, true, "etcd TLS files are mounted read-only");
    assert.equal(held.volume.secret.defaultMode, 0o440, "only the pod's group reads the key");
    assert.ok(!podSpec(worker).volumes.some((v) => v.secret && v.secret.secretName === expected.secret),
      "workers never get etcd's TLS files");
  },
  // Your etcd with its users: the user from the Secret's username, the
  // password only as a read-only file, never in the arguments or the
  // environment; TLS as configured alongside.
  "etcd-auth"() {
    assert.ok(store.startsWith("etcd://"), "an etcd user needs the etcd store");
    assert.equal(coordinatorArgs.get("--etcd-user"), "$(HERD_ETCD_USER)");
    const env = container(coordinator, "coordinator").env || [];
    const user = env.find((e) => e.name === "HERD_ETCD_USER");
    assert.ok(user, "HERD_ETCD_USER is set");
    assert.deepEqual(user.valueFrom.secretKeyRef, { name: expected.secret, key: "username" });
    assert.ok(!env.some((e) => e.valueFrom && e.valueFrom.secretKeyRef && e.valueFrom.secretKeyRef.key === "password"),
      "the password is never in the environment");
    const password = secretFileSource(coordinator, "coordinator", coordinatorArgs.get("--etcd-password-file"));
    assert.deepEqual([password.secretName, password.key], [expected.secret, "password"]);
    assert.deepEqual(password.items.map((i) => i.key), ["password"], "only the password is mounted");
    const held = mountFor(coordinator, "coordinator", coordinatorArgs.get("--etcd-password-file"));
    assert.equal(held.mount.readOnly, true, "the password file is mounted read-only");
    assert.equal(held.volume.secret.defaultMode, 0o440, "only the pod's group reads the password");
    assert.ok(!podSpec(worker).volumes.some((v) => v.secret && v.secret.secretName === expected.secret),
      "workers never get etcd's password");
    assert.equal(coordinatorArgs.has("--etcd-cacert"), expected.tls === "true", "TLS to etcd as configured");
  },
  "ha-etcd"() {
    checkOwnEtcd();
    assert.ok(coordinator.spec.replicas >= 2);
  },
  monitoring() {
    const [monitor] = r.all("ServiceMonitor");
    assert.ok(monitor, "a ServiceMonitor");
    const services = r.all("Service").filter((s) => selects(monitor.spec.selector.matchLabels, labels(s)));
    assert.deepEqual(services.map((s) => s.metadata.name).sort(), [coordinator.metadata.name, worker.spec.serviceName].sort());
    for (const s of services) assert.ok(s.spec.ports.some((p) => p.name === "metrics"), `${s.metadata.name} has a metrics port`);
    assert.deepEqual(monitor.spec.endpoints.map((e) => [e.port, e.honorLabels]), [["metrics", true]]);
    for (const w of [coordinator, worker]) {
      assert.ok(!("prometheus.io/scrape" in (w.spec.template.metadata.annotations || {})));
    }
    assert.equal(r.all("NetworkPolicy").length, 0, "networkPolicy.enabled=false renders none");
  },
};

checkCommonLabels();
checkCoordinator();
checkWorkers();
if (!scenarios[scenario]) throw new Error(`unknown scenario ${scenario}`);
scenarios[scenario]();
console.log(`check_chart ${scenario}: ok`);
