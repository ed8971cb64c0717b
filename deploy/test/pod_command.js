// Plays the kubelet for one rendered container, so a test can run the real
// binary with the command line the chart produces:
//   * builds the environment (env values, downward-API fieldRefs, envFrom
//     and configMapKeyRef from the rendered ConfigMaps);
//   * materializes the volumes under ROOT (Secrets and ConfigMaps as files,
//     emptyDirs and PVCs as folders), failing on any reference that does
//     not resolve;
//   * expands $(VAR) in command and args as Kubernetes does;
//   * moves every absolute path argument under ROOT, failing when a path
//     lies on no volume, or when a --writes flag points at a read-only one
//     (the root filesystem is read-only in the chart);
//   * applies --set FLAG=VALUE (the flag must be rendered) and --add
//     FLAG=VALUE (it must not be) for what cannot run here as in a pod.
// Writes the program name followed by its arguments, NUL-separated.
//
//   node pod_command.js RENDERED.json COMPONENT CONTAINER ROOT
//        [--pod-name N] [--pod-ip IP] [--namespace NS] [--secrets FILE]
//        [--writes FLAG]... [--set FLAG=VALUE]... [--add FLAG=VALUE]...
//        [--in-root MOUNTS_FILE] [--env-out FILE]
// --secrets: {"secret-name": {"key": "plain value"}} for Secrets the chart
// references but does not create (existing token, TLS).
// --in-root: ROOT is an image's root filesystem the caller will chroot into:
// paths stay as the container sees them and may name files the image holds
// (read-only); the emptyDir, PVC and hostPath volumes are listed in
// MOUNTS_FILE ("KIND<TAB>SOURCE<TAB>MOUNT_PATH<TAB>ro|rw" a line; SOURCE is
// the volume name, claim name or host path) for the caller to mount, so that
// pods can share a PVC as they would a ReadWriteMany one.
// --env-out: the container's environment, NAME=VALUE NUL-separated.
"use strict";
const fs = require("fs");
const path = require("path");
const { Rendered, podSpec, container, flags, mountFor } = require("./lib/rendered");

// Flags whose values start with "/" but name no file: etcd key prefixes.
const NOT_PATHS = new Set(["--etcd-prefix"]);

function parseOptions(argv) {
  const [renderedPath, component, containerName, root, ...rest] = argv;
  const options = {
    podName: "pod-0",
    podIp: "127.0.0.1",
    namespace: "default",
    secrets: {},
    writes: [],
    set: [],
    add: [],
    inRoot: null,
    envFile: null,
  };
  for (let i = 0; i < rest.length; i += 2) {
    const [name, value] = [rest[i], rest[i + 1]];
    if (value === undefined) throw new Error(`${name} needs a value`);
    if (name === "--pod-name") options.podName = value;
    else if (name === "--pod-ip") options.podIp = value;
    else if (name === "--namespace") options.namespace = value;
    else if (name === "--secrets") options.secrets = JSON.parse(fs.readFileSync(value, "utf8"));
    else if (name === "--writes") options.writes.push(value);
    else if (name === "--set") options.set.push(splitPair(value));
    else if (name === "--add") options.add.push(splitPair(value));
    else if (name === "--in-root") options.inRoot = value;
    else if (name === "--env-out") options.envFile = value;
    else throw new Error(`unknown option ${name}`);
  }
  return { renderedPath, component, containerName, root, options };
}

function splitPair(text) {
  const eq = text.indexOf("=");
  if (eq < 0) throw new Error(`expected FLAG=VALUE: ${text}`);
  return [text.slice(0, eq), text.slice(eq + 1)];
}

// Secret data as plain strings: rendered (base64 data / stringData) or given.
function secretData(rendered, options, name) {
  const secret = rendered.find("Secret", name);
  if (secret) {
    const data = {};
    for (const [k, v] of Object.entries(secret.data || {})) data[k] = Buffer.from(v, "base64").toString();
    return Object.assign(data, secret.stringData || {});
  }
  if (options.secrets[name]) return options.secrets[name];
  throw new Error(`Secret ${name} is neither rendered nor provided`);
}

function configMapData(rendered, name) {
  return rendered.get("ConfigMap", name).data || {};
}

function fieldValue(fieldPath, options) {
  const fields = {
    "metadata.name": options.podName,
    "metadata.namespace": options.namespace,
    "status.podIP": options.podIp,
    "spec.nodeName": "node-1",
  };
  if (!(fieldPath in fields)) throw new Error(`unsupported fieldRef ${fieldPath}`);
  return fields[fieldPath];
}

function environment(rendered, c, options) {
  const env = {};
  for (const source of c.envFrom || []) {
    if (!source.configMapRef) throw new Error("only configMapRef is supported in envFrom");
    Object.assign(env, configMapData(rendered, source.configMapRef.name));
  }
  for (const variable of c.env || []) {
    const from = variable.valueFrom;
    if (!from) env[variable.name] = expand(variable.value || "", env);
    else if (from.fieldRef) env[variable.name] = fieldValue(from.fieldRef.fieldPath, options);
    else if (from.configMapKeyRef) env[variable.name] = configMapData(rendered, from.configMapKeyRef.name)[from.configMapKeyRef.key];
    else if (from.secretKeyRef) env[variable.name] = secretData(rendered, options, from.secretKeyRef.name)[from.secretKeyRef.key];
    else throw new Error(`unsupported valueFrom in ${variable.name}`);
    if (env[variable.name] === undefined) throw new Error(`env ${variable.name} resolves to nothing`);
  }
  return env;
}

// Kubernetes' $(VAR) expansion; $$ escapes. An unknown variable is a chart
// bug here (Kubernetes would pass "$(VAR)" through verbatim).
function expand(text, env) {
  return text.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (match, name) => {
    if (match === "$$") return "$";
    if (!(name in env)) throw new Error(`$(${name}) is not defined in the container's environment`);
    return env[name];
  });
}

// Secret files are written private (0600): here the pod's user owns them,
// and herd refuses secrets others may read. Inside an image's root
// (--in-root), where the pod runs as its own user, they are written as a
// kubelet writes them: root's, group fsGroup, the volume's defaultMode
// (0440 in the chart), which herd accepts for files it does not own.
function writeFiles(dir, data, items, what, mode, group) {
  fs.mkdirSync(dir, { recursive: true });
  const entries = items ? items.map((i) => [i.key, i.path]) : Object.keys(data).map((k) => [k, k]);
  for (const [key, file] of entries) {
    if (!(key in data)) throw new Error(`${what} has no key ${key}`);
    fs.mkdirSync(path.dirname(path.join(dir, file)), { recursive: true });
    fs.writeFileSync(path.join(dir, file), data[key], { mode });
    if (mode !== undefined) fs.chmodSync(path.join(dir, file), mode);
    if (group !== undefined) fs.chownSync(path.join(dir, file), 0, group);
  }
}

// The volumes the caller mounts itself (--in-root), as MOUNTS_FILE lines.
function listedMount(volume, mount) {
  const mode = mount.readOnly ? "ro" : "rw";
  if (volume.emptyDir) return ["emptyDir", volume.name, mount.mountPath, mode];
  if (volume.persistentVolumeClaim) return ["pvc", volume.persistentVolumeClaim.claimName, mount.mountPath, mode];
  if (volume.hostPath) return ["hostPath", volume.hostPath.path, mount.mountPath, mode];
  return null;
}

function materializeVolumes(rendered, workload, c, root, options) {
  const volumes = podSpec(workload).volumes || [];
  const listed = [];
  for (const mount of c.volumeMounts || []) {
    const volume = volumes.find((v) => v.name === mount.name);
    if (!volume) throw new Error(`volumeMount ${mount.name} has no volume`);
    const dir = path.join(root, mount.mountPath);
    if (volume.persistentVolumeClaim) rendered.get("PersistentVolumeClaim", volume.persistentVolumeClaim.claimName);
    const line = options.inRoot ? listedMount(volume, mount) : null;
    if (line) {
      fs.mkdirSync(dir, { recursive: true }); // the mount point
      listed.push(line.join("\t"));
    } else if (volume.secret) {
      const name = volume.secret.secretName;
      const fsGroup = (podSpec(workload).securityContext || {}).fsGroup;
      if (options.inRoot && fsGroup !== undefined) {
        const mode = volume.secret.defaultMode !== undefined ? volume.secret.defaultMode : 0o644;
        writeFiles(dir, secretData(rendered, options, name), volume.secret.items, `Secret ${name}`, mode, fsGroup);
      } else {
        writeFiles(dir, secretData(rendered, options, name), volume.secret.items, `Secret ${name}`, 0o600);
      }
    } else if (volume.configMap) {
      const name = volume.configMap.name;
      writeFiles(dir, configMapData(rendered, name), volume.configMap.items, `ConfigMap ${name}`);
    } else if (volume.persistentVolumeClaim) {
      fs.mkdirSync(dir, { recursive: true });
    } else if (volume.emptyDir) {
      fs.mkdirSync(dir, { recursive: true });
    } else {
      throw new Error(`volume ${volume.name}: unsupported type`);
    }
  }
  if (options.inRoot) fs.writeFileSync(options.inRoot, listed.map((l) => l + "\n").join(""));
}

function main() {
  const { renderedPath, component, containerName, root, options } = parseOptions(process.argv.slice(2));
  const rendered = new Rendered(renderedPath);
  const workload = rendered.workload(component);
  const c = container(workload, containerName);
  materializeVolumes(rendered, workload, c, root, options);
  const env = environment(rendered, c, options);
  if (options.envFile) {
    fs.writeFileSync(options.envFile, Object.entries(env).map(([k, v]) => `${k}=${v}`).join("\0"));
  }
  const command = (c.command || []).map((part) => expand(part, env));
  if (command.length !== 1) throw new Error(`expected command: [binary], got ${JSON.stringify(c.command)}`);
  const args = flags((c.args || []).map((arg) => expand(arg, env)));

  for (const [flag, value] of options.set) {
    if (!args.has(flag)) throw new Error(`--set ${flag}: the chart does not render it`);
    args.set(flag, value);
  }
  const overridden = new Set(options.set.map(([flag]) => flag));
  for (const [flag, value] of args) {
    if (overridden.has(flag) || NOT_PATHS.has(flag) || typeof value !== "string" || !value.startsWith("/")) continue;
    const held = mountFor(workload, containerName, value);
    // In an image's root: what the image itself holds (a program) may be read.
    const inImage = options.inRoot && !options.writes.includes(flag) && fs.existsSync(path.join(root, value));
    if (!held && inImage) continue;
    if (!held) throw new Error(`${flag}=${value} is on no volume (the root filesystem is read-only)`);
    if (options.writes.includes(flag) && held.mount.readOnly) throw new Error(`${flag}=${value} is on a read-only mount`);
    if ((held.volume.secret || held.volume.configMap) && !fs.existsSync(path.join(root, value))) {
      throw new Error(`${flag}=${value}: no such file in volume ${held.volume.name}`);
    }
    if (!options.inRoot) args.set(flag, path.join(root, value));
  }
  for (const [flag, value] of options.add) {
    if (args.has(flag)) throw new Error(`--add ${flag}: the chart already renders it`);
    args.set(flag, value);
  }
  const argv = [path.basename(command[0])];
  for (const [flag, value] of args) argv.push(value === true ? flag : `${flag}=${value}`);
  process.stdout.write(argv.join("\0"));
}

try {
  main();
} catch (e) {
  console.error(`pod_command: ${e.message}`);
  process.exit(1);
}
