// Applies a Kyverno ClusterPolicy's mutate rules to Pods, offline, and prints the result: what a
// cluster with Kyverno would store when the Pods are created. This EMULATES Kyverno; it does not
// run it (Kyverno's CLI is a Go binary we cannot install here). It knows exactly the constructs
// that deploy/k8s/examples/kyverno-inject.yaml uses and refuses anything else with exit 2, so that
// a policy change it cannot follow is noticed instead of being silently misapplied:
//
//   match.any[].resources: kinds (Pod), operations (must include CREATE), selector.matchLabels
//     (exact values);
//   mutate.patchStrategicMerge, merged the way Kubernetes' strategic merge patch merges a Pod:
//     maps recursively, scalars replaced, and the lists containers/initContainers/
//     ephemeralContainers, volumes and env by `name`, volumeMounts by `mountPath` (the merge keys
//     of the Pod schema): an element whose key is already present is merged into it, a new one is
//     appended. Any other list in a patch is refused;
//   the conditional anchor on a list element, `(field): "glob"` (* and ?): the element's other
//     fields are merged into every existing element whose field matches; nothing is appended;
//   the add-if-not-present anchor `+(field): scalar`: set only where the field is absent. For an
//     env entry, `+(value)` also leaves an entry that has `valueFrom` alone (a container setting
//     the variable either way keeps its setting).
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/apply-kyverno.mjs POLICY.yaml PODS.yaml
//          [--compare=EXPECTED.yaml]
//   Prints every document of PODS.yaml, Pods mutated, as YAML on stdout; on stderr, per Pod, the
//   rules applied or "no rule matched".
//   --compare: print nothing on stdout; instead compare the spec of the (first) mutated Pod with
//   the spec of EXPECTED.yaml's first Pod, keyed lists in any order. Exit 1 with one line per
//   difference.
// Exit 2: bad usage, unreadable input, or a policy construct this emulation does not know.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const require = createRequire(path.join(path.resolve(modules), "x"));
const yaml = require("js-yaml");

function refuse(message) {
  console.error(`apply-kyverno: cannot emulate: ${message}`);
  process.exit(2);
}

// Only the keys in `allowed` may appear in obj (a part of the policy).
function onlyKeys(obj, allowed, where) {
  for (const key of Object.keys(obj ?? {})) {
    if (!allowed.includes(key)) refuse(`${where}.${key} (knows only ${allowed.join(", ")})`);
  }
}

// ---- Matching.

function globMatches(glob, value) {
  const re = glob.replace(/[.+^${}()|[\]\\]/g, "\\$&").replace(/\*/g, ".*").replace(/\?/g, ".");
  return new RegExp(`^${re}$`, "s").test(String(value));
}

function ruleMatches(rule, pod, where) {
  onlyKeys(rule.match, ["any"], `${where}.match`);
  if (!Array.isArray(rule.match?.any)) refuse(`${where}.match.any is not a list`);
  return rule.match.any.some((filter, i) => {
    const at = `${where}.match.any[${i}]`;
    onlyKeys(filter, ["resources"], at);
    const r = filter.resources ?? {};
    onlyKeys(r, ["kinds", "operations", "selector"], `${at}.resources`);
    onlyKeys(r.selector, ["matchLabels"], `${at}.resources.selector`);
    for (const kind of r.kinds ?? []) {
      if (/[*?/]/.test(kind)) refuse(`${at}.resources.kinds: ${kind} (only plain kind names)`);
    }
    for (const [k, v] of Object.entries(r.selector?.matchLabels ?? {})) {
      if (/[*?]/.test(k + v)) refuse(`${at}.resources.selector.matchLabels: wildcard in ${k}: ${v}`);
    }
    if (!(r.kinds ?? []).includes("Pod")) return false;
    if (r.operations && !r.operations.includes("CREATE")) return false;
    const labels = pod.metadata?.labels ?? {};
    return Object.entries(r.selector?.matchLabels ?? {}).every(([k, v]) => labels[k] === String(v));
  });
}

// ---- Strategic merge with Kyverno's two anchors.

// Merge key of the Pod lists a patch may contain, by the list's field name.
const MERGE_KEY = { containers: "name", initContainers: "name", ephemeralContainers: "name",
  volumes: "name", env: "name", volumeMounts: "mountPath" };

const isMap = (v) => v !== null && typeof v === "object" && !Array.isArray(v);
const clone = (v) => structuredClone(v);

// A key's anchor: { kind: "condition" | "addIfAbsent" | null, field }.
function anchorOf(key) {
  let m = /^\((.+)\)$/.exec(key);
  if (m) return { kind: "condition", field: m[1] };
  m = /^\+\((.+)\)$/.exec(key);
  if (m) return { kind: "addIfAbsent", field: m[1] };
  return { kind: /\(/.test(key) || key.startsWith("$") ? "unknown" : null, field: key };
}

// Refuses, before anything is applied, every construct of a patch that mergeMap cannot follow.
// `field` names the list a value sits in, for its merge key.
function checkPatch(value, where, field) {
  if (Array.isArray(value)) {
    const mergeKey = MERGE_KEY[field];
    if (!mergeKey) refuse(`list ${where} (knows how to merge only ${Object.keys(MERGE_KEY).join(", ")})`);
    value.forEach((element, i) => {
      const at = `${where}[${i}]`;
      if (!isMap(element)) refuse(`${at} is not a map`);
      const conditions = Object.keys(element).filter((k) => anchorOf(k).kind === "condition");
      if (conditions.length > 1) refuse(`${at} has more than one conditional anchor`);
      if (conditions.length === 1 && typeof element[conditions[0]] !== "string") {
        refuse(`${at}.${conditions[0]} is not a string pattern`);
      }
      if (conditions.length === 0 && element[mergeKey] === undefined) refuse(`${at} lacks its merge key ${mergeKey}`);
      checkPatch(Object.fromEntries(Object.entries(element).filter(([k]) => !conditions.includes(k))), at);
    });
    return;
  }
  if (!isMap(value)) return;
  for (const [key, v] of Object.entries(value)) {
    const { kind, field: f } = anchorOf(key);
    const at = `${where}.${key}`;
    if (kind === "unknown") refuse(`anchor or directive ${key} at ${where}`);
    if (kind === "condition") refuse(`conditional anchor ${key} outside a list element at ${where}`);
    if (v === null) refuse(`null (a deletion) at ${at}`);
    if (kind === "addIfAbsent" && (isMap(v) || Array.isArray(v))) refuse(`${key} with a map or list at ${at}`);
    checkPatch(v, at, f);
  }
}

// Merges patch (a map, accepted by checkPatch) into target (a map) in place.
function mergeMap(target, patch, where) {
  for (const [key, value] of Object.entries(patch)) {
    const { kind, field } = anchorOf(key);
    const at = `${where}.${field}`;
    if (kind === "addIfAbsent") {
      const alreadySet = field in target || (field === "value" && "valueFrom" in target);
      if (!alreadySet) target[field] = value;
    } else if (Array.isArray(value)) {
      if (target[field] !== undefined && !Array.isArray(target[field])) refuse(`${at} is a list only in the patch`);
      const list = target[field] ?? [];
      mergeList(list, value, field, at);
      if (target[field] !== undefined || list.length) target[field] = list;
    } else if (isMap(value)) {
      if (target[field] !== undefined && !isMap(target[field])) refuse(`${at} is a map only in the patch`);
      target[field] = target[field] ?? {};
      mergeMap(target[field], value, at);
    } else {
      target[field] = value;
    }
  }
}

function mergeList(target, patch, field, where) {
  const mergeKey = MERGE_KEY[field];
  for (const element of patch) {
    const condition = Object.keys(element).find((k) => anchorOf(k).kind === "condition");
    if (condition) {
      const { field: condField } = anchorOf(condition);
      const rest = Object.fromEntries(Object.entries(element).filter(([k]) => k !== condition));
      for (const existing of target) {
        if (existing?.[condField] !== undefined && globMatches(element[condition], existing[condField])) {
          mergeMap(existing, rest, `${where}[${mergeKey}=${existing[mergeKey]}]`);
        }
      }
      continue;
    }
    let existing = target.find((e) => e?.[mergeKey] === element[mergeKey]);
    if (!existing) {
      existing = {};
      target.push(existing);
    }
    mergeMap(existing, clone(element), `${where}[${mergeKey}=${element[mergeKey]}]`);
  }
}

// ---- Comparison (--compare).

// Differences between two values, keyed lists compared as maps by their merge key.
function differences(got, want, at, out) {
  const field = at.split(".").pop().replace(/\[.*$/, "");
  if (Array.isArray(got) && Array.isArray(want) && MERGE_KEY[field]) {
    const key = MERGE_KEY[field];
    const byKey = (list) => new Map(list.map((e) => [e?.[key], e]));
    const g = byKey(got);
    const w = byKey(want);
    for (const k of new Set([...g.keys(), ...w.keys()])) {
      if (!w.has(k)) out.push(`${at}[${key}=${k}]: only in the mutated pod`);
      else if (!g.has(k)) out.push(`${at}[${key}=${k}]: only in the expected pod`);
      else differences(g.get(k), w.get(k), `${at}[${key}=${k}]`, out);
    }
    return;
  }
  if (isMap(got) && isMap(want)) {
    for (const k of new Set([...Object.keys(got), ...Object.keys(want)])) {
      if (!(k in want)) out.push(`${at}.${k}: only in the mutated pod`);
      else if (!(k in got)) out.push(`${at}.${k}: only in the expected pod`);
      else differences(got[k], want[k], `${at}.${k}`, out);
    }
    return;
  }
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    out.push(`${at}: mutated ${JSON.stringify(got)}, expected ${JSON.stringify(want)}`);
  }
}

// ---- Main.

const args = process.argv.slice(2);
const compareWith = args.find((a) => a.startsWith("--compare="))?.slice("--compare=".length);
const [policyFile, podsFile, ...extra] = args.filter((a) => !a.startsWith("--compare="));
if (!policyFile || !podsFile || extra.length) {
  console.error("usage: apply-kyverno.mjs POLICY.yaml PODS.yaml [--compare=EXPECTED.yaml]");
  process.exit(2);
}
const load = (file) => {
  try {
    return yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d !== null && d !== undefined);
  } catch (e) {
    console.error(`apply-kyverno: ${file}: ${e.message.split("\n")[0]}`);
    process.exit(2);
  }
};

const policies = load(policyFile);
const rules = [];
for (const p of policies) {
  const where = `${policyFile}: ${p.kind}/${p.metadata?.name}`;
  if (p.apiVersion !== "kyverno.io/v1" || !["ClusterPolicy", "Policy"].includes(p.kind)) {
    refuse(`${where}: not a kyverno.io/v1 ClusterPolicy or Policy`);
  }
  onlyKeys(p.spec, ["rules", "background"], `${where} spec`);
  (p.spec?.rules ?? []).forEach((rule, i) => {
    const at = `${where} spec.rules[${i}]`;
    onlyKeys(rule, ["name", "match", "mutate"], at);
    if (!rule.mutate) refuse(`${at} (${rule.name}) has no mutate`);
    onlyKeys(rule.mutate, ["patchStrategicMerge"], `${at}.mutate`);
    if (!isMap(rule.mutate.patchStrategicMerge)) refuse(`${at}.mutate.patchStrategicMerge is not a map`);
    checkPatch(rule.mutate.patchStrategicMerge, `${at}.mutate.patchStrategicMerge`);
    rules.push({ rule, at });
  });
}
if (rules.length === 0) refuse(`${policyFile}: no rules`);

const docs = load(podsFile);
for (const doc of docs) {
  if (doc.kind !== "Pod") continue;
  const applied = [];
  for (const { rule, at } of rules) {
    if (!ruleMatches(rule, doc, at)) continue;
    mergeMap(doc, clone(rule.mutate.patchStrategicMerge), "");
    applied.push(rule.name);
  }
  console.error(`apply-kyverno: Pod/${doc.metadata?.name}: ` +
    (applied.length ? `applied ${applied.join(", ")}` : "no rule matched"));
}

if (compareWith) {
  const got = docs.find((d) => d.kind === "Pod");
  const want = load(compareWith).find((d) => d.kind === "Pod");
  if (!got || !want) {
    console.error(`apply-kyverno: no Pod in ${got ? compareWith : podsFile}`);
    process.exit(2);
  }
  const out = [];
  differences(got.spec, want.spec, "spec", out);
  for (const line of out) console.log(`apply-kyverno: ${line}`);
  if (out.length) process.exit(1);
  console.log(`apply-kyverno: the mutated Pod/${got.metadata?.name} has the spec of ${compareWith}`);
} else {
  process.stdout.write(docs.map((d) => yaml.dump(d, { lineWidth: -1 })).join("---\n"));
}
