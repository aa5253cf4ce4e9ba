// Checks the `cluster` label of a rendered chart: every ServiceMonitor endpoint adds
// cluster=VALUE to what it scrapes (NCCL Inspector's dashboard filters on it), or, with "-" as
// the value, no endpoint adds any `cluster` label.
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/check-cluster-label.mjs FILE.yaml VALUE|-
// Exit 1 with one line per problem.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const require = createRequire(path.join(path.resolve(modules), "x"));
const yaml = require("js-yaml");

const [file, want] = process.argv.slice(2);
if (!file || !want) {
  console.error("usage: check-cluster-label.mjs FILE.yaml VALUE|-");
  process.exit(2);
}
const monitors = yaml
  .loadAll(fs.readFileSync(file, "utf8"))
  .filter((o) => o && o.kind === "ServiceMonitor");
const problems = [];
if (monitors.length === 0) problems.push(`${file}: no ServiceMonitor rendered`);
for (const m of monitors) {
  for (const [i, e] of (m.spec.endpoints ?? []).entries()) {
    const where = `${m.metadata.name} endpoint ${i} (${e.path})`;
    const added = (e.relabelings ?? []).filter((r) => r.targetLabel === "cluster");
    if (want === "-") {
      if (added.length > 0) problems.push(`${where}: adds a cluster label though none is set`);
    } else if (added.length !== 1 || added[0].replacement !== want || added[0].sourceLabels) {
      problems.push(`${where}: does not add cluster="${want}"`);
    }
  }
}
for (const p of problems) console.log(p);
process.exit(problems.length > 0 ? 1 : 0);
