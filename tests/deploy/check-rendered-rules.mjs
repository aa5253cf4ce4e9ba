// Checks the alert rules the Helm chart renders against the rule file they come from, with the
// chart's values applied by an independent reading of what they should do, and writes the
// rendered rules as a plain rule file (for promtool's rule tests).
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/check-rendered-rules.mjs \
//          RENDER.yaml SOURCE.yaml OUT.yaml [VALUES.json]
//   RENDER.yaml  `helm template` output holding one PrometheusRule
//   SOURCE.yaml  deploy/prometheus/ncclwatch-rules.yaml
//   OUT.yaml     where the PrometheusRule's spec is written
//   VALUES.json  the chart's prometheusRule values the render was made with ({} when absent):
//                runbookBaseUrl, additionalAlertLabels, alerts.<Name>.{enabled,for,severity,
//                threshold,labels}
// Exit 1 naming the first difference; 0 when the render is exactly the source with the values.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const yaml = createRequire(path.join(path.resolve(modules), "x"))("js-yaml");

const [renderPath, sourcePath, outPath, valuesJson] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: check-rendered-rules.mjs RENDER.yaml SOURCE.yaml OUT.yaml [VALUES.json]");
  process.exit(2);
}
const values = valuesJson ? JSON.parse(valuesJson) : {};
const rules = yaml.loadAll(fs.readFileSync(renderPath, "utf8"))
  .filter((doc) => doc && doc.kind === "PrometheusRule");
if (rules.length !== 1) {
  console.error(`check-rendered-rules: ${renderPath} holds ${rules.length} PrometheusRules, not 1`);
  process.exit(1);
}
const rendered = rules[0].spec;
fs.writeFileSync(outPath, yaml.dump(rendered, { lineWidth: -1 }));

// What the values should make of the source, rule by rule.
const expected = yaml.load(fs.readFileSync(sourcePath, "utf8"));
const base = (values.runbookBaseUrl ?? "").replace(/\/+$/, "");
for (const group of expected.groups) {
  group.rules = group.rules.filter((rule) => {
    const over = values.alerts?.[rule.alert] ?? {};
    if (over.enabled === false) return false;
    if (over.for !== undefined) rule.for = over.for;
    if (over.threshold !== undefined) {
      rule.expr = rule.expr.replace(/((?:[<>]=?|[!=]=)\s*)[0-9.eE+-]+(\s*)$/,
        (_, op, tail) => `${op}${over.threshold}${tail}`);
    }
    rule.labels = { ...rule.labels, ...(values.additionalAlertLabels ?? {}),
      ...(over.labels ?? {}) };
    if (over.severity !== undefined) rule.labels.severity = over.severity;
    if (base) {
      delete rule.annotations.runbook;
      rule.annotations.runbook_url = `${base}/${rule.alert}.md`;
    }
    return true;
  });
}
expected.groups = expected.groups.filter((group) => group.rules.length > 0);

// The first path at which two values differ, or null.
function difference(want, got, where) {
  if (typeof want !== typeof got || Array.isArray(want) !== Array.isArray(got) ||
      (want === null) !== (got === null)) {
    return `${where}: expected ${JSON.stringify(want)}, rendered ${JSON.stringify(got)}`;
  }
  if (typeof want !== "object" || want === null) {
    return want === got ? null
      : `${where}: expected ${JSON.stringify(want)}, rendered ${JSON.stringify(got)}`;
  }
  const keys = new Set([...Object.keys(want), ...Object.keys(got)]);
  for (const key of keys) {
    const found = difference(want[key], got[key], `${where}.${key}`);
    if (found) return found;
  }
  return null;
}

const found = difference(expected, rendered, "spec");
if (found) {
  console.error(`check-rendered-rules: ${renderPath}: ${found}`);
  process.exit(1);
}
const count = rendered.groups.reduce((n, g) => n + g.rules.length, 0);
console.log(`check-rendered-rules: ${renderPath}: ${count} rules, exactly as expected`);
