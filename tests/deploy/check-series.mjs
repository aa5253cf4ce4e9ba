// Every PromQL expression in the alert rules and the Grafana dashboards may only name series that
// ncclwatch exports (or Prometheus' own `up`). The exported names are read from the C++ sources,
// not from a list kept by hand: a renamed metric breaks this check, not a dashboard at 3 a.m.
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/check-series.mjs <repo root>
// (scripts/check-deploy installs js-yaml there).
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const yaml = createRequire(path.join(process.env.NCCLWATCH_NODE_MODULES ?? "node_modules", "x"))(
  "js-yaml");

const root = process.argv[2] ?? ".";

// --- what the code exports -------------------------------------------------------------------
function* sourceFiles(dir) {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isDirectory()) yield* sourceFiles(p);
    else if (/\.(cc|h)$/.test(entry.name) && !/_test\.cc$/.test(entry.name)) yield p;
  }
}
const exported = new Set(["up"]);  // Prometheus' own, per scrape target
for (const dir of ["aggregator", "agent", "common", "proto", "plugin"]) {
  for (const file of sourceFiles(path.join(root, dir))) {
    const text = fs.readFileSync(file, "utf8");
    for (const m of text.matchAll(/"((?:nccl|ncclwatch)_[a-z0-9_]+)"/g)) exported.add(m[1]);
    // Histograms are rendered as <name>_bucket, _sum and _count.
    for (const m of text.matchAll(/GetHistogram\(\s*"([a-z0-9_]+)"/g)) {
      for (const suffix of ["_bucket", "_sum", "_count"]) exported.add(m[1] + suffix);
    }
  }
}

// --- what the expressions name ---------------------------------------------------------------
const KEYWORDS = new Set(["and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring",
  "group_left", "group_right", "inf", "nan", "atan2", "start", "end"]);

// Metric names of one PromQL expression: strings, label matchers, ranges and grouping lists
// removed, function names (followed by "(") skipped.
function metricNames(expr) {
  let e = expr.replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""');
  e = e.replace(/\{[^{}]*\}/g, " ");
  e = e.replace(/\[[^\]]*\]/g, " ");
  e = e.replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ");
  e = e.replace(/\$\{?[A-Za-z_][A-Za-z0-9_]*\}?/g, " ");  // Grafana variables
  const names = [];
  for (const m of e.matchAll(/([A-Za-z_:][A-Za-z0-9_:]*)(\s*\()?/g)) {
    const [, word, call] = m;
    if (call || KEYWORDS.has(word.toLowerCase())) continue;
    if (/^\d/.test(word) || /^(e|E)$/.test(word)) continue;
    names.push(word);
  }
  return names;
}

const problems = [];
let expressions = 0;
function check(where, expr) {
  if (typeof expr !== "string" || expr.trim() === "") return;
  ++expressions;
  for (const name of metricNames(expr)) {
    if (!exported.has(name)) problems.push(`${where}: '${name}' is not a series ncclwatch exports`);
  }
}

// Alert rules (and the templates in their annotations, which may hold queries).
const rulesFile = path.join(root, "deploy/prometheus/ncclwatch-rules.yaml");
for (const group of yaml.load(fs.readFileSync(rulesFile, "utf8")).groups) {
  for (const rule of group.rules) {
    const name = rule.alert ?? rule.record;
    check(`${rulesFile} ${name}`, String(rule.expr));
    for (const [key, text] of Object.entries(rule.annotations ?? {})) {
      for (const m of String(text).matchAll(/query\s+"((?:[^"\\]|\\.)*)"/g)) {
        check(`${rulesFile} ${name} annotation ${key}`, m[1].replace(/\\"/g, '"'));
      }
      for (const m of String(text).matchAll(/query\s+`([^`]*)`/g)) {
        check(`${rulesFile} ${name} annotation ${key}`, m[1]);
      }
    }
  }
}

// Dashboards: panel targets, and template variables' queries.
const dashDir = path.join(root, "deploy/grafana/dashboards");
for (const file of fs.readdirSync(dashDir).filter((f) => f.endsWith(".json"))) {
  const dash = JSON.parse(fs.readFileSync(path.join(dashDir, file), "utf8"));
  const walk = (panels) => {
    for (const panel of panels ?? []) {
      for (const target of panel.targets ?? []) check(`${file} panel '${panel.title}'`, target.expr);
      walk(panel.panels);
    }
  };
  walk(dash.panels);
  for (const v of dash.templating?.list ?? []) {
    if (v.type !== "query") continue;
    const q = typeof v.query === "string" ? v.query : v.query?.query;
    if (!q) continue;
    const m = /^\s*(?:label_values|query_result)\((.*)\)\s*$/s.exec(q);
    if (!m) { check(`${file} variable '${v.name}'`, q); continue; }
    // label_values(<selector>, label) or label_values(label): the selector is the expression.
    const args = m[1];
    const comma = args.lastIndexOf(",");
    if (comma >= 0) check(`${file} variable '${v.name}'`, args.slice(0, comma));
  }
}

if (expressions === 0) problems.push("no PromQL expression found: is the checker reading the right files?");
if (problems.length) {
  console.error(problems.join("\n"));
  process.exit(1);
}
console.log(`check-series: ${expressions} PromQL expressions name only the ${exported.size} ` +
            "series ncclwatch exports");
