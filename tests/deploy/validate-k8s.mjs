// Validates rendered Kubernetes YAML (helm template, kubectl kustomize output, plain manifests):
// every object against its Kubernetes or prometheus-operator schema (npm kubernetes-models), and
// every field name against the API's known fields, since those schemas accept unknown fields and
// a typo ("imagee", "honorLabel") would otherwise be silently ignored by the cluster.
// A Kyverno policy (no schema here) is checked through what it writes: each rule's
// patchStrategicMerge of Pods, its anchors ("(name)", "+(value)") unwrapped, as a Pod.
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/validate-k8s.mjs FILE.yaml...
// Exit 1 with one line per problem; prints a per-file summary otherwise.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const require = createRequire(path.join(modules, "x"));
const yaml = require("js-yaml");
const { ObjectSerializer } = await import(
  path.join(path.resolve(modules), "@kubernetes/client-node/dist/gen/models/ObjectSerializer.js"));

// apiVersion -> [module prefix, client-node type prefix]; null type prefix: a CRD.
const API = {
  "v1": ["kubernetes-models/v1", "V1"],
  "apps/v1": ["kubernetes-models/apps/v1", "V1"],
  "networking.k8s.io/v1": ["kubernetes-models/networking.k8s.io/v1", "V1"],
  "rbac.authorization.k8s.io/v1": ["kubernetes-models/rbac.authorization.k8s.io/v1", "V1"],
  "policy/v1": ["kubernetes-models/policy/v1", "V1"],
  "scheduling.k8s.io/v1": ["kubernetes-models/scheduling.k8s.io/v1", "V1"],
  "storage.k8s.io/v1": ["kubernetes-models/storage.k8s.io/v1", "V1"],
  "monitoring.coreos.com/v1": ["@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1", null],
};

// Keys under these are the user's (labels, selectors, parameters), not API fields.
const FREE_FORM = new Set(["labels", "annotations", "matchLabels", "nodeSelector", "params",
  "data", "stringData", "binaryData"]);

// Paths present in `original` that `roundTripped` lost: fields the API does not know.
function lostFields(original, roundTripped, at, out) {
  if (Array.isArray(original)) {
    original.forEach((v, i) => lostFields(v, roundTripped?.[i], `${at}[${i}]`, out));
    return;
  }
  if (original === null || typeof original !== "object") return;
  for (const [key, value] of Object.entries(original)) {
    if (roundTripped === undefined || roundTripped === null || !(key in roundTripped)) {
      out.push(`${at}.${key}`);
      continue;
    }
    if (!FREE_FORM.has(key)) lostFields(value, roundTripped[key], `${at}.${key}`, out);
  }
}

// For CRDs (no typed client): every key must be a property name the CRD's type declares.
const crdNames = new Map();
function crdFieldNames(kind, modulePrefix) {
  if (!crdNames.has(kind)) {
    const dts = fs.readFileSync(path.join(modules, modulePrefix, `${kind}.d.ts`), "utf8");
    crdNames.set(kind, new Set([...dts.matchAll(/"?([A-Za-z_$][\w$-]*)"?\??\s*:/g)].map((m) => m[1])));
  }
  return crdNames.get(kind);
}
function unknownCrdKeys(value, known, at, out) {
  if (Array.isArray(value)) {
    value.forEach((v, i) => unknownCrdKeys(v, known, `${at}[${i}]`, out));
    return;
  }
  if (value === null || typeof value !== "object") return;
  for (const [key, v] of Object.entries(value)) {
    if (!known.has(key)) out.push(`${at}.${key}`);
    if (!FREE_FORM.has(key)) unknownCrdKeys(v, known, `${at}.${key}`, out);
  }
}

// Kyverno's anchors around a key: (k) condition, +(k) add if absent, =(k) equality, ^(k) global,
// <(k) existence, X(k) negation.
function unanchored(value) {
  if (Array.isArray(value)) return value.map(unanchored);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).map(([k, v]) =>
    [k.replace(/^[+=^<X]?\((.+)\)$/, "$1"), unanchored(v)]));
}

// The Pods a Kyverno policy's mutate rules patch, as Pod objects to validate; problems for rules
// that this check cannot read.
function kyvernoPodPatches(obj, where, problems) {
  const pods = [];
  for (const rule of obj.spec?.rules ?? []) {
    const patch = rule.mutate?.patchStrategicMerge;
    if (!patch) continue;
    const kinds = ["any", "all"].flatMap((k) => (rule.match?.[k] ?? []).flatMap(
      (m) => m.resources?.kinds ?? [])).concat(rule.match?.resources?.kinds ?? []);
    if (kinds.length === 0 || kinds.some((k) => k !== "Pod")) {
      problems.push(`${where}: rule ${rule.name} patches ${kinds.join(",") || "no kind"}, not only Pods`);
      continue;
    }
    pods.push({ apiVersion: "v1", kind: "Pod", ...unanchored(patch),
      metadata: { name: `${obj.metadata?.name}.${rule.name}`, ...unanchored(patch.metadata ?? {}) } });
  }
  if (pods.length === 0) problems.push(`${where}: no Pod patch to check`);
  return pods;
}

const problems = [];
for (const file of process.argv.slice(2)) {
  const kinds = {};
  let docs;
  try {
    docs = yaml.loadAll(fs.readFileSync(file, "utf8"));
  } catch (e) {
    problems.push(`${file}: not YAML: ${e.message}`);
    continue;
  }
  const objects = [];
  const patches = new Set();  // counted as their policy, not as Pods
  for (const obj of docs) {
    if (obj === null || obj === undefined) continue;
    if (obj.apiVersion === "kyverno.io/v1" && ["ClusterPolicy", "Policy"].includes(obj.kind)) {
      const pods = kyvernoPodPatches(obj, `${file}: ${obj.kind}/${obj.metadata?.name}`, problems);
      pods.forEach((p) => patches.add(p));
      objects.push(...pods);
      const kind = `${obj.kind} (as its Pod patches)`;
      kinds[kind] = (kinds[kind] ?? 0) + 1;
    } else {
      objects.push(obj);
    }
  }
  for (const obj of objects) {
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    const api = API[obj.apiVersion];
    if (!api) {
      problems.push(`${where}: apiVersion ${obj.apiVersion} is not one this check knows`);
      continue;
    }
    const [modulePrefix, typePrefix] = api;
    let Model;
    try {
      Model = require(path.join(modulePrefix, obj.kind))[obj.kind];
    } catch {
      problems.push(`${where}: no ${obj.apiVersion} kind ${obj.kind}`);
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (e) {
      problems.push(`${where}: ${e.message.split("\n").slice(0, 3).join(" ")}`);
    }
    const unknown = [];
    if (typePrefix) {
      const type = typePrefix + obj.kind;
      const back = ObjectSerializer.serialize(ObjectSerializer.deserialize(obj, type), type);
      lostFields(obj, back, "", unknown);
    } else {
      unknownCrdKeys(obj.spec, crdFieldNames(obj.kind, modulePrefix), ".spec", unknown);
    }
    for (const f of unknown) problems.push(`${where}: unknown field ${f}`);
    if (!patches.has(obj)) kinds[obj.kind] = (kinds[obj.kind] ?? 0) + 1;
  }
  if (Object.keys(kinds).length === 0) problems.push(`${file}: no Kubernetes object in it`);
  console.log(`${file}: ${Object.entries(kinds).map(([k, n]) => `${n} ${k}`).join(", ")}`);
}
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
