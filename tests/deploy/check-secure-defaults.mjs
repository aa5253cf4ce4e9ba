// Checks that rendered manifests are secure by default (docs/security.md): the aggregator takes
// batches only with the ingest token (or a client certificate, with mutual TLS) and answers
// queries only with the query token, both from
// Secrets that the same output creates or that the operator must create; the agents send the
// ingest token; no --insecure-* flag; NetworkPolicies for both components. No pod uses the host
// network or IPC namespace, and every container drops all capabilities, cannot escalate and has a
// read-only root filesystem, except the one that must be privileged: the CSI driver (container
// `csi` of the agent pods, running ncclwatch-csi-driver), whose only writable host mounts are the
// kubelet's directories and whose plugin directory is read-only.
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/check-secure-defaults.mjs FILE.yaml
//          [--operator-creates-secrets]   (plain manifests: the Secrets are made by hand)
// Exit 1 with one line per problem.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const require = createRequire(path.join(path.resolve(modules), "x"));
const yaml = require("js-yaml");

const file = process.argv[2];
const operatorCreatesSecrets = process.argv.includes("--operator-creates-secrets");
const objects = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((o) => o && o.kind);
const problems = [];
const find = (kind, suffix) =>
  objects.find((o) => o.kind === kind && o.metadata.name.endsWith(suffix));

// The Secret behind the file an arg names, through the container's mounts and the pod's volumes.
function secretOf(pod, container, flag) {
  const arg = (container.args ?? []).find((a) => a.startsWith(`${flag}=`));
  if (!arg) return null;
  const filePath = arg.slice(flag.length + 1);
  const mount = (container.volumeMounts ?? []).find((m) => filePath.startsWith(`${m.mountPath}/`));
  const volume = mount && (pod.volumes ?? []).find((v) => v.name === mount.name);
  return volume?.secret?.secretName ?? `(${filePath} is not in a Secret volume)`;
}

const aggregator = find("Deployment", "-aggregator");
const agent = find("DaemonSet", "-agent");
if (!aggregator || !agent) {
  problems.push("no aggregator Deployment or agent DaemonSet rendered");
} else {
  const aPod = aggregator.spec.template.spec;
  const gPod = agent.spec.template.spec;
  const ingest = secretOf(aPod, aPod.containers[0], "--ingest-token-file");
  const query = secretOf(aPod, aPod.containers[0], "--query-token-file");
  const sent = secretOf(gPod, gPod.containers[0], "--aggregator-token-file");
  const mtls = (aPod.containers[0].args ?? []).some((a) => a.startsWith("--tls-client-ca-file="));
  if (!ingest && !mtls) {
    problems.push("the aggregator takes batches without --ingest-token-file or client certificates");
  }
  if (!query) problems.push("the aggregator answers queries without --query-token-file");
  if (ingest && sent !== ingest) {
    problems.push(`the agents send the token of ${sent}, the aggregator expects ${ingest}`);
  }
  for (const [who, pod] of [["aggregator", aPod], ["agent", gPod]]) {
    const insecure = (pod.containers[0].args ?? []).filter((a) => a.startsWith("--insecure"));
    if (insecure.length) problems.push(`the ${who} runs with ${insecure.join(" ")}`);
  }
  // Plugins are attributed to pods by the kernel: the agent sees the host's processes and reads
  // the kubelet's pod directory names; its socket admits its user and group only.
  const gArgs = gPod.containers[0].args ?? [];
  const procDir = gArgs.find((a) => a.startsWith("--proc-dir="));
  const podLogs = gArgs.find((a) => a.startsWith("--pod-logs-dir="))?.slice("--pod-logs-dir=".length);
  if (!gPod.hostPID || procDir === "--proc-dir=" || !podLogs) {
    problems.push("the agent attributes plugins by what they claim (needs hostPID, --proc-dir and --pod-logs-dir)");
  } else if (!(gPod.containers[0].volumeMounts ?? []).some((m) => m.mountPath === podLogs && m.readOnly)) {
    problems.push(`the agent's --pod-logs-dir=${podLogs} is not a read-only mount`);
  }
  if (!gArgs.includes("--socket-mode=0660")) problems.push("the agent's socket is not mode 0660");
  for (const name of [ingest, query]) {
    if (name && !name.startsWith("(") && !find("Secret", name) && !operatorCreatesSecrets) {
      problems.push(`Secret ${name} is mounted but not rendered`);
    }
  }
}
// Privileges, container by container.
const CSI_DRIVER = "/usr/bin/ncclwatch-csi-driver";
const argOf = (c, flag) =>
  (c.args ?? []).find((a) => a.startsWith(`${flag}=`))?.slice(flag.length + 1);
for (const w of objects.filter((o) => ["Deployment", "DaemonSet", "StatefulSet"].includes(o.kind))) {
  const pod = w.spec.template.spec;
  const name = `${w.kind} ${w.metadata.name}`;
  if (pod.hostNetwork) problems.push(`${name} uses the host network`);
  if (pod.hostIPC) problems.push(`${name} uses the host IPC namespace`);
  if (pod.hostPID && w !== agent) problems.push(`${name} uses the host PID namespace`);
  for (const c of [...(pod.initContainers ?? []), ...(pod.containers ?? [])]) {
    const sc = c.securityContext ?? {};
    const where = `${name}: container ${c.name}`;
    const mounts = c.volumeMounts ?? [];
    if (w === agent && c.name === "csi" && (c.command ?? [])[0] === CSI_DRIVER) {
      // Privileged on purpose: it mounts into the kubelet's pod directories, with Bidirectional
      // propagation there only.
      const kubeletDir = argOf(c, "--kubelet-dir");
      if (!sc.readOnlyRootFilesystem) problems.push(`${where} has a writable root filesystem`);
      for (const m of mounts.filter((m) => m.mountPropagation === "Bidirectional")) {
        if (!kubeletDir || m.mountPath !== `${kubeletDir}/pods`) {
          problems.push(`${where} propagates mounts back to the host from ${m.mountPath}`);
        }
      }
      const pluginDir = argOf(c, "--plugin-dir");
      if (!mounts.some((m) => m.mountPath === pluginDir && m.readOnly)) {
        problems.push(`${where}: its --plugin-dir=${pluginDir} is not a read-only mount`);
      }
      continue;
    }
    if (sc.privileged) problems.push(`${where} is privileged`);
    if (sc.allowPrivilegeEscalation !== false) problems.push(`${where} allows privilege escalation`);
    if (!(sc.capabilities?.drop ?? []).includes("ALL") || (sc.capabilities?.add ?? []).length) {
      problems.push(`${where} keeps or adds capabilities`);
    }
    if (!sc.readOnlyRootFilesystem) problems.push(`${where} has a writable root filesystem`);
    if (mounts.some((m) => m.mountPropagation && m.mountPropagation !== "None")) {
      problems.push(`${where} shares mount propagation with the host`);
    }
  }
}
for (const suffix of ["-aggregator", "-agent"]) {
  if (!find("NetworkPolicy", suffix)) problems.push(`no NetworkPolicy for the ${suffix.slice(1)}`);
}
if (problems.length) {
  for (const p of problems) console.log(`${file}: ${p}`);
  process.exit(1);
}
console.log(
  `${file}: authenticated ingest and queries, NetworkPolicies for both components, kernel attribution of plugins, ` +
    "no privileges beyond the CSI driver's",
);
