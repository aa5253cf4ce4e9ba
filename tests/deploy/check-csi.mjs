// Checks the CSI driver csi.ncclwatch.io in rendered manifests (deploy/k8s/examples/training-pod-csi.yaml
// is what it serves). With `present`: one CSIDriver for inline (Ephemeral) volumes only, and in the
// agent DaemonSet a container `csi` running ncclwatch-csi-driver whose flags agree with its mounts,
// with the agent's socket and plugin directories, with the CSIDriver's name and with the port that
// the agent Service, ServiceMonitor and NetworkPolicy expose. With `absent`: none of that.
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/check-csi.mjs FILE.yaml present|absent
// Exit 1 with one line per problem.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const require = createRequire(path.join(path.resolve(modules), "x"));
const yaml = require("js-yaml");

const [file, want] = process.argv.slice(2);
if (!["present", "absent"].includes(want)) {
  console.error("usage: check-csi.mjs FILE.yaml present|absent");
  process.exit(2);
}
const objects = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((o) => o && o.kind);
const problems = [];
const isAgent = (o) => o.metadata.name.endsWith("-agent");
const drivers = objects.filter((o) => o.kind === "CSIDriver");
const agent = objects.find((o) => o.kind === "DaemonSet" && isAgent(o));
const pod = agent?.spec.template.spec;
const csi = pod?.containers.find((c) => c.name === "csi");
const service = objects.find((o) => o.kind === "Service" && isAgent(o));
const monitor = objects.find((o) => o.kind === "ServiceMonitor" && isAgent(o));
const policy = objects.find((o) => o.kind === "NetworkPolicy" && isAgent(o));

if (want === "absent") {
  if (drivers.length) problems.push(`CSIDriver ${drivers.map((d) => d.metadata.name)} rendered`);
  if (csi) problems.push("the agent DaemonSet has a csi container");
  if (service?.spec.ports.some((p) => p.name === "csi-http")) problems.push("the agent Service exposes csi-http");
  if (monitor?.spec.endpoints.some((e) => e.port === "csi-http")) problems.push("the agent ServiceMonitor scrapes csi-http");
} else if (drivers.length !== 1 || !csi) {
  problems.push(`expected one CSIDriver and a csi container, found ${drivers.length} and ${csi ? 1 : 0}`);
} else {
  const driver = drivers[0];
  const spec = driver.spec;
  const expected = { attachRequired: false, podInfoOnMount: true, fsGroupPolicy: "None",
    requiresRepublish: false, storageCapacity: false };
  for (const [k, v] of Object.entries(expected)) {
    if (spec[k] !== v) problems.push(`CSIDriver .spec.${k} is ${spec[k]}, not ${v}`);
  }
  if (JSON.stringify(spec.volumeLifecycleModes) !== '["Ephemeral"]') {
    problems.push(`CSIDriver .spec.volumeLifecycleModes is ${JSON.stringify(spec.volumeLifecycleModes)}`);
  }
  if (driver.metadata.labels?.["security.openshift.io/csi-ephemeral-volume-profile"] !== "restricted") {
    problems.push("CSIDriver lacks the label security.openshift.io/csi-ephemeral-volume-profile: restricted");
  }

  const arg = (c, flag) => (c.args ?? []).find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
  if ((csi.command ?? [])[0] !== "/usr/bin/ncclwatch-csi-driver") {
    problems.push(`the csi container runs ${csi.command}, not /usr/bin/ncclwatch-csi-driver`);
  }
  if (arg(csi, "--driver-name") !== driver.metadata.name) {
    problems.push(`--driver-name=${arg(csi, "--driver-name")} is not the CSIDriver's ${driver.metadata.name}`);
  }
  // A container path is the host path it shows when it is a hostPath volume mounted at that path.
  const hostPathAt = (p) => {
    const m = (csi.volumeMounts ?? []).find((m) => m.mountPath === p);
    const v = m && pod.volumes.find((v) => v.name === m.name);
    return v?.hostPath?.path === p ? m : null;
  };
  const kubeletDir = arg(csi, "--kubelet-dir");
  const pods = hostPathAt(`${kubeletDir}/pods`);
  if (!pods || pods.mountPropagation !== "Bidirectional") {
    problems.push(`${kubeletDir}/pods is not the host's, mounted with Bidirectional propagation`);
  }
  const endpoint = `unix://${kubeletDir}/plugins/${driver.metadata.name}/csi.sock`;
  if (arg(csi, "--endpoint") !== endpoint) problems.push(`--endpoint is not ${endpoint}`);
  if (!hostPathAt(`${kubeletDir}/plugins/${driver.metadata.name}`)) {
    problems.push(`${kubeletDir}/plugins/${driver.metadata.name} (its socket) is not the host's`);
  }
  if (arg(csi, "--registration-dir") !== `${kubeletDir}/plugins_registry` ||
      !hostPathAt(`${kubeletDir}/plugins_registry`)) {
    problems.push(`--registration-dir is not the host's ${kubeletDir}/plugins_registry`);
  }
  // What it hands to pods: the agent's socket directory and the init container's plugin directory.
  const agentC = pod.containers.find((c) => c.name === "agent");
  const socketDir = arg(agentC, "--listen")?.replace(/^unix:\/\//, "").replace(/\/[^/]*$/, "");
  if (arg(csi, "--socket-dir") !== socketDir || !hostPathAt(socketDir)) {
    problems.push(`--socket-dir=${arg(csi, "--socket-dir")} is not the host's ${socketDir}, the agent's socket directory`);
  }
  const install = (pod.initContainers ?? []).find((c) => c.name === "install-plugin");
  const pluginDir = install?.command?.[1];
  if (arg(csi, "--plugin-dir") !== pluginDir || !hostPathAt(pluginDir)?.readOnly) {
    problems.push(`--plugin-dir=${arg(csi, "--plugin-dir")} is not the host's ${pluginDir} (read-only), where the plugin is installed`);
  }
  if (!(csi.env ?? []).some((e) => e.name === "NODE_NAME" && e.valueFrom?.fieldRef?.fieldPath === "spec.nodeName")) {
    problems.push("the csi container has no NODE_NAME from spec.nodeName");
  }
  // Health and scraping on --http-port, like the agent's.
  const port = Number(arg(csi, "--http-port"));
  if (!(csi.ports ?? []).some((p) => p.name === "csi-http" && p.containerPort === port)) {
    problems.push(`the csi container does not name port ${port} csi-http`);
  }
  if (csi.readinessProbe?.httpGet?.path !== "/readyz" || csi.livenessProbe?.httpGet?.path !== "/healthz") {
    problems.push("the csi container's probes are not /readyz (readiness) and /healthz (liveness)");
  }
  if (!service?.spec.ports.some((p) => p.name === "csi-http" && p.targetPort === "csi-http")) {
    problems.push("the agent Service does not expose csi-http");
  }
  if (monitor && !monitor.spec.endpoints.some((e) => e.port === "csi-http" && e.path === "/metrics")) {
    problems.push("the agent ServiceMonitor does not scrape csi-http /metrics");
  }
  if (policy && !policy.spec.ingress.some((r) => r.ports?.some((p) => p.port === port))) {
    problems.push(`the agent NetworkPolicy does not admit port ${port}`);
  }
}
if (problems.length) {
  for (const p of problems) console.log(`${file}: ${p}`);
  process.exit(1);
}
console.log(want === "present"
  ? `${file}: CSIDriver ${drivers[0].metadata.name} and its csi container agree`
  : `${file}: no CSI driver`);
