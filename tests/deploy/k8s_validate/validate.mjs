#!/usr/bin/env node
// Offline validation of gemmd's Kubernetes manifests: node validate.mjs DIR
//
// DIR holds a kustomization.yaml. Every resource it lists is loaded and
//  1. validated against the Kubernetes OpenAPI schema of its apiVersion/kind
//     (kubernetes-models); an unknown apiVersion/kind fails;
//  2. checked for unknown fields (the schema allows them; `kubectl apply` rejects them, so
//     a typo such as `grpcc:` would only surface at deploy time);
// then the project checks the schema cannot express: gRPC probes, the drain fitting in
// the termination grace, the GPU limit, Services and the PodDisruptionBudget selecting the
// pods, the Prometheus annotations, non-root.
// One line per check; exit status 1 on any failure, 2 on bad usage.

import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const results = [];  // {ok, name, detail}

function check(name, ok, detail = "") {
  results.push({ ok: Boolean(ok), name, detail });
  console.log(`${ok ? "ok  " : "FAIL"} ${name}${detail ? `: ${detail}` : ""}`);
  return Boolean(ok);
}

function finish() {
  const failed = results.filter((r) => !r.ok);
  if (failed.length > 0) {
    console.log(`\n${failed.length} of ${results.length} checks failed:`);
    for (const r of failed) console.log(`  - ${r.name}${r.detail ? `: ${r.detail}` : ""}`);
    process.exit(1);
  }
  console.log(`\nall ${results.length} checks passed`);
  process.exit(0);
}

function usage(message) {
  console.error(`validate.mjs: ${message}\nusage: node validate.mjs DIR  (DIR holds kustomization.yaml)`);
  process.exit(2);
}

// A port as a number (a string of digits counts: the schema reports the type, the project
// checks need not repeat it).
const portNumber = (v) => (typeof v === "number" ? v : /^[0-9]+$/.test(String(v)) ? Number(v) : NaN);
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const describe = (v) => (v === undefined ? "unset" : JSON.stringify(v));

// ---- Loading ------------------------------------------------------------------------

// Kustomization fields whose effect the checks below do not depend on. Anything else
// (patches, name prefixes, components, generators) changes what is applied, so validating
// the files as written would prove nothing: it fails instead.
const KUSTOMIZATION_FIELDS = new Set([
  "apiVersion", "kind", "metadata", "resources", "namespace", "images",
  "commonAnnotations", "labels", "commonLabels",
]);

function parseYamlFile(file) {
  const text = fs.readFileSync(file, "utf8");
  // YAML 1.1, as kubectl reads manifests (sigs.k8s.io/yaml): `yes`/`on` are booleans
  // there, so an annotation written `yes` unquoted fails here as it would at apply time.
  const docs = YAML.parseAllDocuments(text, { version: "1.1" });
  const objects = [];
  for (const doc of docs) {
    if (doc.errors.length > 0) {
      throw new Error(`${file}: YAML error: ${doc.errors[0].message.split("\n")[0]}`);
    }
    const value = doc.toJS();
    if (value === null || value === undefined) continue;  // empty document
    objects.push(value);
  }
  return objects;
}

function loadKustomization(dir) {
  const file = path.join(dir, "kustomization.yaml");
  if (!fs.existsSync(file)) usage(`${file} does not exist`);
  let docs;
  try {
    docs = parseYamlFile(file);
  } catch (e) {
    check("kustomization.yaml parses", false, e.message);
    finish();
  }
  const k = docs[0];
  const resourcesOk =
    docs.length === 1 && isObject(k) && Array.isArray(k.resources) && k.resources.length > 0;
  check("kustomization.yaml lists resources", resourcesOk,
        resourcesOk ? k.resources.join(", ") : "expected one document with a non-empty resources: list");
  if (!resourcesOk) finish();
  const unsupported = Object.keys(k).filter((key) => !KUSTOMIZATION_FIELDS.has(key));
  check("kustomization.yaml uses only fields this validator accounts for", unsupported.length === 0,
        unsupported.length ? `not applied here: ${unsupported.join(", ")}` : "");
  // kustomize reads a kustomization without apiVersion/kind as one.
  check("kustomization.yaml is a Kustomization",
        (k.kind ?? "Kustomization") === "Kustomization" &&
        String(k.apiVersion ?? "kustomize.config.k8s.io/").startsWith("kustomize.config.k8s.io/"),
        `apiVersion ${describe(k.apiVersion)}, kind ${describe(k.kind)}`);

  const objects = [];  // {file, index, obj}
  const seen = new Set();
  for (const entry of k.resources) {
    const name = String(entry);
    if (seen.has(name)) {
      check(`resource ${name} listed once`, false, "listed twice");
      continue;
    }
    seen.add(name);
    if (/^[a-z][a-z0-9+.-]*:\/\//i.test(name) || name.includes("?ref=")) {
      check(`resource ${name} is a local file`, false, "remote resources are not validated");
      continue;
    }
    const file = path.join(dir, name);
    if (!fs.existsSync(file)) {
      check(`resource ${name} exists`, false, `no ${file}`);
      continue;
    }
    if (!fs.statSync(file).isFile()) {
      check(`resource ${name} is a file`, false, "directories (nested kustomizations) are not followed");
      continue;
    }
    try {
      const docs2 = parseYamlFile(file);
      if (docs2.length === 0) check(`resource ${name} has objects`, false, "no YAML documents");
      docs2.forEach((obj, index) => objects.push({ file: name, index, obj }));
    } catch (e) {
      check(`resource ${name} parses`, false, e.message);
    }
  }
  return { kustomization: k, objects };
}

// ---- Schema validation ----------------------------------------------------------------

// The kubernetes-models module of an apiVersion: "v1" -> kubernetes-models/v1,
// "apps/v1" -> kubernetes-models/apps/v1.
async function modelClass(apiVersion, kind) {
  if (typeof apiVersion !== "string" || !/^([a-z0-9.-]+\/)?v[0-9]+[a-z0-9]*$/.test(apiVersion)) {
    return null;
  }
  let module;
  try {
    module = await import(`kubernetes-models/${apiVersion}`);
  } catch {
    return null;
  }
  const cls = module[kind];
  return typeof cls === "function" && cls.kind === kind && cls.apiVersion === apiVersion ? cls : null;
}

// Wraps a plain JSON value so that every object records which of its properties were read.
// The schema validators (compiled by ajv) read each property they know; one never read is
// a field the schema does not have. `nodes` collects {path, obj, read} for the report.
function recordReads(value, pathText, nodes) {
  if (Array.isArray(value)) {
    return value.map((item, i) => recordReads(item, `${pathText}[${i}]`, nodes));
  }
  if (!isObject(value)) return value;
  const copy = {};
  for (const [key, child] of Object.entries(value)) {
    copy[key] = recordReads(child, pathText ? `${pathText}.${key}` : key, nodes);
  }
  const read = new Set();
  nodes.push({ path: pathText, obj: copy, read });
  return new Proxy(copy, {
    get(target, key, receiver) {
      if (typeof key === "string") read.add(key);
      return Reflect.get(target, key, receiver);
    },
  });
}

function schemaErrors(error) {
  if (Array.isArray(error?.errors)) {
    return error.errors.map((e) => {
      const where = e.instancePath ? e.instancePath.slice(1).replaceAll("/", ".") : "(object)";
      const params = e.params && Object.keys(e.params).length ? ` ${JSON.stringify(e.params)}` : "";
      return `${where} ${e.message ?? e.keyword}${params}`;
    });
  }
  return [String(error?.message ?? error)];
}

async function validateSchemas(objects) {
  for (const { file, index, obj } of objects) {
    const label = `${file}${index > 0 ? `#${index}` : ""}`;
    if (!isObject(obj)) {
      check(`${label}: is an object`, false, `got ${describe(obj)}`);
      continue;
    }
    const id = `${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"} (${label})`;
    const cls = await modelClass(obj.apiVersion, obj.kind);
    if (!check(`${id}: known kind`, cls !== null,
               cls ? `${obj.apiVersion} ${obj.kind}`
                   : `no Kubernetes schema for apiVersion ${describe(obj.apiVersion)} kind ${describe(obj.kind)}`)) {
      continue;
    }
    check(`${id}: metadata.name set`, typeof obj.metadata?.name === "string" && obj.metadata.name !== "");

    const nodes = [];
    const wrapped = recordReads(JSON.parse(JSON.stringify(obj)), "", nodes);
    let errors = [];
    try {
      cls.prototype.validate.call(wrapped);
    } catch (e) {
      errors = schemaErrors(e);
    }
    check(`${id}: schema`, errors.length === 0, errors.slice(0, 8).join("; "));

    // Outermost unknown fields only (whatever lies under one is unknown too).
    let unknown = [];
    for (const node of nodes) {
      for (const key of Object.keys(node.obj)) {
        if (!node.read.has(key)) unknown.push(node.path ? `${node.path}.${key}` : key);
      }
    }
    unknown = unknown.filter((u) => !unknown.some((o) => u !== o && (u.startsWith(`${o}.`) || u.startsWith(`${o}[`))));
    check(`${id}: no unknown fields`, unknown.length === 0, unknown.join(", "));
  }
}

// ---- Project checks -------------------------------------------------------------------

// The value of the (non-boolean) flag --NAME in args: "--NAME=V", "-NAME=V", or "--NAME V"
// (then the next word is the value, as Abseil reads it, "-1" included); the last one wins;
// `fallback` when absent.
function flagValue(args, name, fallback) {
  let value = fallback;
  for (let i = 0; i < args.length; i++) {
    const arg = String(args[i]);
    const m = /^--?([A-Za-z0-9_]+)(?:=(.*))?$/s.exec(arg);
    if (!m || m[1] !== name) continue;
    if (m[2] !== undefined) {
      value = m[2];
    } else if (i + 1 < args.length) {
      value = String(args[++i]);
    } else {
      value = undefined;  // no value: not a number
    }
  }
  return value;
}

function selectorMatches(selector, labels) {
  // A label selector (matchLabels/matchExpressions) or a Service's plain map.
  if (!isObject(selector)) return false;
  const isLabelSelector = "matchLabels" in selector || "matchExpressions" in selector;
  const matchLabels = isLabelSelector ? selector.matchLabels ?? {} : selector;
  const expressions = isLabelSelector ? selector.matchExpressions ?? [] : [];
  if (Object.keys(matchLabels).length === 0 && expressions.length === 0) return false;  // selects all (or none)
  for (const [k, v] of Object.entries(matchLabels)) {
    if (labels[k] !== String(v)) return false;
  }
  for (const e of expressions) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const values = (e.values ?? []).map(String);
    switch (e.operator) {
      case "In": if (!has || !values.includes(labels[e.key])) return false; break;
      case "NotIn": if (has && values.includes(labels[e.key])) return false; break;
      case "Exists": if (!has) return false; break;
      case "DoesNotExist": if (has) return false; break;
      default: return false;
    }
  }
  return true;
}

// A Service or probe port: a container port's number or name -> the container port.
function resolvePort(ports, target) {
  if (typeof target === "string" && !/^[0-9]+$/.test(target)) return ports.find((p) => p.name === target);
  return ports.find((p) => portNumber(p.containerPort) === portNumber(target));
}

function projectChecks(objects) {
  const all = objects.map((o) => o.obj).filter(isObject);
  const deployments = all.filter((o) => o.kind === "Deployment");
  if (!check("exactly one Deployment", deployments.length === 1, `found ${deployments.length}`)) return;
  const dep = deployments[0];
  const name = `Deployment/${dep.metadata?.name}`;
  const template = dep.spec?.template ?? {};
  const podLabels = template.metadata?.labels ?? {};
  const podSpec = template.spec ?? {};
  const containers = podSpec.containers ?? [];

  check(`${name}: selector selects its pod template`,
        selectorMatches(dep.spec?.selector, podLabels),
        `selector ${describe(dep.spec?.selector)}, pod labels ${describe(podLabels)}`);

  // The serving container: the one with a port named grpc.
  const serving = containers.filter((c) => (c.ports ?? []).some((p) => p.name === "grpc"));
  if (!check(`${name}: one container with a port named grpc`, serving.length === 1,
             `found ${serving.length}`)) return;
  const c = serving[0];
  const cname = `${name} container ${c.name}`;
  const ports = c.ports ?? [];
  const args = (c.args ?? []).map(String);
  if (Array.isArray(c.command)) args.unshift(...c.command.map(String));
  const grpcPortEntry = ports.find((p) => p.name === "grpc");
  const grpcPort = { ...grpcPortEntry, containerPort: portNumber(grpcPortEntry.containerPort) };

  const portArg = Number(flagValue(args, "port", "50051"));
  check(`${cname}: grpc port ${grpcPort.containerPort} = --port`, grpcPort.containerPort === portArg,
        `--port ${flagValue(args, "port", "50051")} (50051 if absent)`);

  // Probes: Kubernetes' gRPC probe (grpc.health.v1, service "") on the grpc port.
  for (const kind of ["readinessProbe", "livenessProbe"]) {
    const probe = c[kind];
    const grpc = probe?.grpc;
    let ok = isObject(grpc) && portNumber(grpc.port) === grpcPort.containerPort &&
             (grpc.service === undefined || grpc.service === "");
    let detail = !probe ? "missing"
               : !isObject(grpc) ? `not a grpc probe (has ${Object.keys(probe).join(", ")})`
               : portNumber(grpc.port) !== grpcPort.containerPort ? `grpc.port ${describe(grpc.port)}, grpc container port is ${grpcPort.containerPort}`
               : grpc.service ? `grpc.service ${describe(grpc.service)}: the server reports health for service "" only`
               : `grpc port ${grpc.port}`;
    if (ok) {
      const period = probe.periodSeconds ?? 10, timeout = probe.timeoutSeconds ?? 1;
      const failures = probe.failureThreshold ?? 3;
      if (timeout > period) { ok = false; detail = `timeoutSeconds ${timeout} > periodSeconds ${period}`; }
      else if (kind === "livenessProbe" && failures < 2) {
        ok = false; detail = "failureThreshold < 2: one slow answer would restart the server";
      } else {
        detail += `, every ${period}s, fails after ${failures}`;
      }
    }
    check(`${cname}: ${kind} is gRPC on the grpc port`, ok, detail);
  }
  if (c.startupProbe !== undefined) {
    const grpc = c.startupProbe?.grpc;
    check(`${cname}: startupProbe is gRPC on the grpc port`,
          isObject(grpc) && portNumber(grpc.port) === grpcPort.containerPort,
          isObject(grpc) ? `grpc port ${describe(grpc.port)}` : "not a grpc probe");
  }

  // The drain fits in the termination grace.
  const graceText = flagValue(args, "shutdown_grace_s", "30");
  const grace = Number(graceText);
  const termination = podSpec.terminationGracePeriodSeconds ?? 30;  // Kubernetes' default
  const graceOk = Number.isFinite(grace) && grace >= 0 && Number.isInteger(termination) &&
                  termination > grace;
  check(`${name}: terminationGracePeriodSeconds > --shutdown_grace_s`, graceOk,
        `terminationGracePeriodSeconds ${termination}${podSpec.terminationGracePeriodSeconds === undefined ? " (default)" : ""}, --shutdown_grace_s ${graceText}${flagValue(args, "shutdown_grace_s") === undefined ? " (default)" : ""}` +
        (graceOk ? "" : ": the kubelet would SIGKILL the server before its drain ends"));

  // A GPU.
  const gpu = c.resources?.limits?.["nvidia.com/gpu"];
  const gpuCount = Number(gpu);
  const gpuRequest = c.resources?.requests?.["nvidia.com/gpu"];
  check(`${cname}: resources.limits nvidia.com/gpu`,
        gpu !== undefined && Number.isInteger(gpuCount) && gpuCount >= 1 &&
        (gpuRequest === undefined || Number(gpuRequest) === gpuCount),
        gpu === undefined ? "missing: the pod would land on a node without a GPU (or not see one)"
                          : `limit ${describe(gpu)}, request ${describe(gpuRequest)}`);
  for (const r of ["cpu", "memory"]) {
    check(`${cname}: ${r} request and limit`,
          c.resources?.requests?.[r] !== undefined && c.resources?.limits?.[r] !== undefined,
          `request ${describe(c.resources?.requests?.[r])}, limit ${describe(c.resources?.limits?.[r])}`);
  }

  // Prometheus annotations.
  const annotations = template.metadata?.annotations ?? {};
  const metricsPort = ports.find((p) => p.name === "metrics");
  const metricsArg = flagValue(args, "metrics_port", "9464");
  check(`${name}: prometheus.io/scrape "true"`, annotations["prometheus.io/scrape"] === "true",
        describe(annotations["prometheus.io/scrape"]));
  check(`${name}: prometheus.io/port = metrics container port = --metrics_port`,
        metricsPort !== undefined &&
        String(annotations["prometheus.io/port"]) === String(portNumber(metricsPort.containerPort)) &&
        portNumber(metricsPort.containerPort) === Number(metricsArg),
        `annotation ${describe(annotations["prometheus.io/port"])}, container port ${metricsPort ? metricsPort.containerPort : "(none named metrics)"}, --metrics_port ${metricsArg}`);
  check(`${name}: prometheus.io/path /metrics`,
        (annotations["prometheus.io/path"] ?? "/metrics") === "/metrics",
        describe(annotations["prometheus.io/path"]));

  // Non-root, hardened (the container's securityContext overrides the pod's).
  const podSc = podSpec.securityContext ?? {};
  for (const ctr of [...(podSpec.initContainers ?? []), ...containers]) {
    const sc = ctr.securityContext ?? {};
    const nonRoot = sc.runAsNonRoot ?? podSc.runAsNonRoot;
    const user = sc.runAsUser ?? podSc.runAsUser;
    const problems = [];
    if (nonRoot !== true) problems.push(`runAsNonRoot ${describe(nonRoot)}`);
    if (user === 0) problems.push("runAsUser 0");
    if (sc.privileged === true) problems.push("privileged");
    if (sc.allowPrivilegeEscalation !== false) problems.push(`allowPrivilegeEscalation ${describe(sc.allowPrivilegeEscalation)}`);
    if (sc.readOnlyRootFilesystem !== true) problems.push(`readOnlyRootFilesystem ${describe(sc.readOnlyRootFilesystem)}`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL")) problems.push("capabilities.drop lacks ALL");
    if ((sc.capabilities?.add ?? []).length > 0) problems.push(`capabilities.add ${describe(sc.capabilities.add)}`);
    check(`${name} container ${ctr.name}: runs as non-root, unprivileged`, problems.length === 0,
          problems.length ? problems.join(", ") : `runAsUser ${describe(user)}`);
  }

  // Services.
  const services = all.filter((o) => o.kind === "Service");
  const headless = services.filter((s) => s.spec?.clusterIP === "None" ||
                                          String(s.metadata?.name).endsWith("-headless"));
  const virtual = services.filter((s) => !headless.includes(s));
  check("a headless Service", headless.length >= 1, headless.map((s) => s.metadata?.name).join(", ") || "none");
  check("a ClusterIP Service", virtual.length >= 1, virtual.map((s) => s.metadata?.name).join(", ") || "none");
  for (const svc of services) {
    const sname = `Service/${svc.metadata?.name}`;
    const isHeadless = headless.includes(svc);
    if (isHeadless) {
      const ok = svc.spec?.clusterIP === "None";
      check(`${sname}: clusterIP None`, ok,
            ok ? "" : `clusterIP ${describe(svc.spec?.clusterIP)}: DNS would answer one virtual IP, not the pods', and clients could not balance over them`);
    } else {
      check(`${sname}: type ClusterIP`, (svc.spec?.type ?? "ClusterIP") === "ClusterIP",
            `type ${describe(svc.spec?.type)}`);
    }
    check(`${sname}: selector selects the Deployment's pods`, selectorMatches(svc.spec?.selector, podLabels),
          `selector ${describe(svc.spec?.selector)}, pod labels ${describe(podLabels)}`);
    const svcPorts = svc.spec?.ports ?? [];
    const unresolved = svcPorts.filter((p) => !resolvePort(ports, p.targetPort ?? p.port));
    check(`${sname}: ports reach container ports`, svcPorts.length > 0 && unresolved.length === 0,
          unresolved.length ? `no container port for ${unresolved.map((p) => describe(p.targetPort ?? p.port)).join(", ")}`
                            : svcPorts.map((p) => `${p.port}->${resolvePort(ports, p.targetPort ?? p.port).name}`).join(", "));
    const wanted = isHeadless ? ["grpc"] : ["grpc", "metrics"];
    const reached = svcPorts.map((p) => resolvePort(ports, p.targetPort ?? p.port)?.name);
    const missing = wanted.filter((w) => !reached.includes(w));
    check(`${sname}: serves ${wanted.join(" and ")}`, missing.length === 0,
          missing.length ? `missing ${missing.join(", ")}` : "");
    if (isHeadless) {
      const grpcSvcPort = svcPorts.find((p) => resolvePort(ports, p.targetPort ?? p.port)?.name === "grpc");
      check(`${sname}: grpc on port ${grpcPort.containerPort} (clients dial the pod IPs on the Service's port)`,
            portNumber(grpcSvcPort?.port) === grpcPort.containerPort,
            `service port ${describe(grpcSvcPort?.port)}`);
    }
  }

  // PodDisruptionBudget.
  const pdbs = all.filter((o) => o.kind === "PodDisruptionBudget");
  check("a PodDisruptionBudget", pdbs.length >= 1, `found ${pdbs.length}`);
  const replicas = dep.spec?.replicas ?? 1;
  for (const pdb of pdbs) {
    const pname = `PodDisruptionBudget/${pdb.metadata?.name}`;
    check(`${pname}: selector selects the Deployment's pods`, selectorMatches(pdb.spec?.selector, podLabels),
          `selector ${describe(pdb.spec?.selector)}, pod labels ${describe(podLabels)}`);
    const { minAvailable, maxUnavailable } = pdb.spec ?? {};
    let ok = (minAvailable === undefined) !== (maxUnavailable === undefined);
    let detail = `minAvailable ${describe(minAvailable)}, maxUnavailable ${describe(maxUnavailable)}, replicas ${replicas}`;
    if (ok && maxUnavailable !== undefined && (maxUnavailable === 0 || maxUnavailable === "0%")) {
      ok = false; detail += ": no pod could ever be evicted (node drains would hang)";
    }
    if (ok && typeof minAvailable === "number" && minAvailable >= replicas) {
      ok = false; detail += ": no pod could ever be evicted (node drains would hang)";
    }
    check(`${pname}: allows one eviction at a time`, ok, detail);
  }
}

// ---- Main -----------------------------------------------------------------------------

const dir = process.argv[2];
if (!dir || process.argv.length > 3) usage("one argument expected");
if (!fs.existsSync(dir) || !fs.statSync(dir).isDirectory()) usage(`${dir} is not a directory`);

const { objects } = loadKustomization(dir);
await validateSchemas(objects);
projectChecks(objects);
finish();
