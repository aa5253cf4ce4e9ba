// Checks pods against the Kubernetes Pod Security Standards, offline: what the built-in Pod
// Security admission would refuse in a namespace labelled pod-security.kubernetes.io/enforce=LEVEL.
// Our own reading of the standard (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
// not a copy of pod-security-admission; check names are Kubernetes' own, so that a message here
// matches what a cluster says.
//
// What it guarantees: a pod that passes is admitted by every Kubernetes from 1.31 on. Where the
// policy changed after 1.31 the stricter side wins: hostProbesAndHostLifecycle (enforced from 1.34)
// is checked, net.ipv4.tcp_rmem/tcp_wmem (safe from 1.32) are not in the safe set, and the
// relaxations for user-namespaced pods (hostUsers: false) are not applied.
//
// Pod specs are found in Pod, PodTemplate, ReplicationController, ReplicaSet, Deployment,
// DaemonSet, StatefulSet, Job and CronJob objects; other objects are skipped. Containers means
// initContainers, containers and ephemeralContainers.
//
// Usage: NCCLWATCH_NODE_MODULES=<dir> node tests/deploy/check-pod-security.mjs
//          [--level=baseline|restricted] [--expect-names] FILE.yaml...
//   --expect-names  self-test on known-bad input: an object named violates-<check>[--<variant>]
//                   must fail exactly that check (lower-cased, "_" as "-": violates-procmount,
//                   violates-capabilities-baseline), any other object must pass, and every check
//                   of the level must be covered by some object.
// Output: one line per violation, "FILE: Kind/name: check: what at path", exit 1; or
// "FILE: Kind/name passes LEVEL" per object, exit 0. Exit 2: bad usage or unreadable input.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.NCCLWATCH_NODE_MODULES ?? "node_modules";
const require = createRequire(path.join(path.resolve(modules), "x"));
const yaml = require("js-yaml");

// ---- What each level allows.

const BASELINE_CAPABILITIES = new Set(["AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID",
  "KILL", "MKNOD", "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"]);
// Safe in every release from 1.29 on (tcp_rmem and tcp_wmem joined in 1.32: left out, see above).
const SAFE_SYSCTLS = new Set(["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
  "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range",
  "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
  "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"]);
const LATER_SYSCTLS = new Map([["net.ipv4.tcp_rmem", "1.32"], ["net.ipv4.tcp_wmem", "1.32"]]);
// container_engine_t from 1.31.
const SELINUX_TYPES = new Set(["", "container_t", "container_init_t", "container_kvm_t",
  "container_engine_t"]);
const PROFILE_TYPES = new Set(["RuntimeDefault", "Localhost"]);  // seccomp and AppArmor fields
const APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/";
const RESTRICTED_VOLUMES = new Set(["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
  "persistentVolumeClaim", "projected", "secret"]);

const BASELINE_CHECKS = ["hostPathVolumes", "privileged", "capabilities_baseline", "hostNamespaces",
  "hostPorts", "seLinuxOptions", "procMount", "seccompProfile_baseline", "appArmorProfile",
  "sysctls", "windowsHostProcess", "hostProbesAndHostLifecycle"];
// At restricted, restrictedVolumes takes the place of hostPathVolumes, as in Kubernetes.
const RESTRICTED_CHECKS = ["restrictedVolumes", "allowPrivilegeEscalation", "runAsNonRoot",
  "runAsUser", "seccompProfile_restricted", "capabilities_restricted"];

// ---- Where pod specs live.

// kind -> path from the object to its pod template ({metadata, spec}); [] for a Pod itself.
const TEMPLATE_PATH = {
  Pod: [], PodTemplate: ["template"], ReplicationController: ["spec", "template"],
  ReplicaSet: ["spec", "template"], Deployment: ["spec", "template"],
  DaemonSet: ["spec", "template"], StatefulSet: ["spec", "template"], Job: ["spec", "template"],
  CronJob: ["spec", "jobTemplate", "spec", "template"],
};

// Every container of a pod spec, with the path to it.
function containersOf(spec, at) {
  const out = [];
  for (const list of ["initContainers", "containers", "ephemeralContainers"]) {
    (spec[list] ?? []).forEach((c, i) => out.push({ c: c ?? {}, at: `${at}.${list}[${i}]` }));
  }
  return out;
}

const isSet = (v) => v !== undefined && v !== null && v !== "";

// ---- The checks. Each takes {meta, spec, metaAt, specAt} and returns [what at path, ...].

function baselineChecks(level) {
  return {
    hostPathVolumes: ({ spec, specAt }) => level === "restricted" ? [] :
      (spec.volumes ?? []).flatMap((v, i) => v?.hostPath ?
        [`hostPath volume "${v.name}" at ${specAt}.volumes[${i}].hostPath`] : []),

    privileged: ({ spec, specAt }) => containersOf(spec, specAt).flatMap(({ c, at }) =>
      c.securityContext?.privileged === true ?
        [`container "${c.name}" is privileged at ${at}.securityContext.privileged`] : []),

    capabilities_baseline: ({ spec, specAt }) => containersOf(spec, specAt).flatMap(({ c, at }) =>
      (c.securityContext?.capabilities?.add ?? []).flatMap((cap, i) =>
        BASELINE_CAPABILITIES.has(cap) ? [] :
          [`container "${c.name}" adds ${cap} at ${at}.securityContext.capabilities.add[${i}]`])),

    hostNamespaces: ({ spec, specAt }) => ["hostNetwork", "hostPID", "hostIPC"].flatMap((f) =>
      spec[f] === true ? [`${f}: true at ${specAt}.${f}`] : []),

    hostPorts: ({ spec, specAt }) => containersOf(spec, specAt).flatMap(({ c, at }) =>
      (c.ports ?? []).flatMap((p, i) => isSet(p?.hostPort) && p.hostPort !== 0 ?
        [`container "${c.name}" binds hostPort ${p.hostPort} at ${at}.ports[${i}].hostPort`] : [])),

    seLinuxOptions: ({ spec, specAt }) => {
      const setters = [{ sc: spec.securityContext, at: `${specAt}.securityContext` },
        ...containersOf(spec, specAt).map(({ c, at }) => ({ sc: c.securityContext, at: `${at}.securityContext` }))];
      return setters.flatMap(({ sc, at }) => {
        const o = sc?.seLinuxOptions;
        if (!o) return [];
        const out = [];
        if (!SELINUX_TYPES.has(o.type ?? "")) out.push(`type "${o.type}" at ${at}.seLinuxOptions.type`);
        for (const f of ["user", "role"]) {
          if (isSet(o[f])) out.push(`${f} "${o[f]}" may not be set, at ${at}.seLinuxOptions.${f}`);
        }
        return out;
      });
    },

    procMount: ({ spec, specAt }) => containersOf(spec, specAt).flatMap(({ c, at }) => {
      const m = c.securityContext?.procMount;
      return isSet(m) && m !== "Default" ?
        [`container "${c.name}" sets procMount "${m}" at ${at}.securityContext.procMount`] : [];
    }),

    // Fields only: the seccomp annotations stopped counting in 1.19 and have no effect since 1.27.
    seccompProfile_baseline: ({ spec, specAt }) => profileTypes(spec, specAt, "seccompProfile")
      .flatMap(({ type, at }) => isSet(type) && !PROFILE_TYPES.has(type) ? [`type "${type}" at ${at}`] : []),

    appArmorProfile: ({ meta, spec, metaAt, specAt }) => [
      ...profileTypes(spec, specAt, "appArmorProfile").flatMap(({ type, at }) =>
        isSet(type) && !PROFILE_TYPES.has(type) ? [`type "${type}" at ${at}`] : []),
      ...Object.entries(meta?.annotations ?? {}).flatMap(([k, v]) =>
        k.startsWith(APPARMOR_ANNOTATION) && isSet(v) && v !== "runtime/default" &&
          !String(v).startsWith("localhost/") ? [`"${v}" at ${metaAt}.annotations['${k}']`] : []),
    ],

    sysctls: ({ spec, specAt }) => (spec.securityContext?.sysctls ?? []).flatMap((s, i) => {
      if (SAFE_SYSCTLS.has(s?.name)) return [];
      const since = LATER_SYSCTLS.get(s?.name);
      return [`${since ? `sysctl ${s.name} (safe only from Kubernetes ${since})` : `unsafe sysctl ${s?.name}`}` +
        ` at ${specAt}.securityContext.sysctls[${i}].name`];
    }),

    windowsHostProcess: ({ spec, specAt }) => [
      { sc: spec.securityContext, at: `${specAt}.securityContext` },
      ...containersOf(spec, specAt).map(({ c, at }) => ({ sc: c.securityContext, at: `${at}.securityContext` })),
    ].flatMap(({ sc, at }) => sc?.windowsOptions?.hostProcess === true ?
      [`hostProcess: true at ${at}.windowsOptions.hostProcess`] : []),

    hostProbesAndHostLifecycle: ({ spec, specAt }) => containersOf(spec, specAt).flatMap(({ c, at }) => {
      const handlers = [
        ...["livenessProbe", "readinessProbe", "startupProbe"].map((p) => [c[p], `${at}.${p}`]),
        ...["postStart", "preStop"].map((h) => [c.lifecycle?.[h], `${at}.lifecycle.${h}`]),
      ];
      return handlers.flatMap(([h, hAt]) => ["httpGet", "tcpSocket"].flatMap((kind) =>
        isSet(h?.[kind]?.host) ? [`container "${c.name}" names host "${h[kind].host}" at ${hAt}.${kind}.host`] : []));
    }),
  };
}

// The pod's and every container's securityContext.<field>.type, set or not.
function profileTypes(spec, specAt, field) {
  return [{ sc: spec.securityContext, at: `${specAt}.securityContext` },
    ...containersOf(spec, specAt).map(({ c, at }) => ({ sc: c.securityContext, at: `${at}.securityContext` }))]
    .filter(({ sc }) => sc?.[field])
    .map(({ sc, at }) => ({ type: sc[field].type, at: `${at}.${field}.type` }));
}

const restrictedChecks = {
  restrictedVolumes: ({ spec, specAt }) => (spec.volumes ?? []).flatMap((v, i) => {
    const bad = Object.keys(v ?? {}).filter((k) => k !== "name" && !RESTRICTED_VOLUMES.has(k));
    // (A volume of no type is defaulted to emptyDir by the API server.)
    return bad.length ? [`volume "${v?.name}" is ${bad.join(", ")} at ${specAt}.volumes[${i}].${bad[0]}`] : [];
  }),

  allowPrivilegeEscalation: ({ spec, specAt }) => linuxOnly(spec, () =>
    containersOf(spec, specAt).flatMap(({ c, at }) => c.securityContext?.allowPrivilegeEscalation === false ? [] :
      [`container "${c.name}" must set false at ${at}.securityContext.allowPrivilegeEscalation`])),

  runAsNonRoot: ({ spec, specAt }) => {
    const pod = spec.securityContext?.runAsNonRoot;
    const out = pod === false ? [`false at ${specAt}.securityContext.runAsNonRoot`] : [];
    for (const { c, at } of containersOf(spec, specAt)) {
      const own = c.securityContext?.runAsNonRoot;
      if (own === false) out.push(`container "${c.name}" sets false at ${at}.securityContext.runAsNonRoot`);
      else if (own !== true && pod !== true) {
        out.push(`container "${c.name}" must set true at ${at}.securityContext.runAsNonRoot` +
          ` (or the pod at ${specAt}.securityContext.runAsNonRoot)`);
      }
    }
    return out;
  },

  runAsUser: ({ spec, specAt }) => [{ sc: spec.securityContext, at: `${specAt}.securityContext` },
    ...containersOf(spec, specAt).map(({ c, at }) => ({ sc: c.securityContext, at: `${at}.securityContext` }))]
    .flatMap(({ sc, at }) => sc?.runAsUser === 0 ? [`0 (root) at ${at}.runAsUser`] : []),

  // Like Kubernetes, also reports the explicitly bad types that seccompProfile_baseline reports.
  seccompProfile_restricted: ({ spec, specAt }) => linuxOnly(spec, () => {
    const podType = spec.securityContext?.seccompProfile?.type;
    const out = isSet(podType) && !PROFILE_TYPES.has(podType) ?
      [`type "${podType}" at ${specAt}.securityContext.seccompProfile.type`] : [];
    for (const { c, at } of containersOf(spec, specAt)) {
      const own = c.securityContext?.seccompProfile;
      if (own) {
        if (!PROFILE_TYPES.has(own.type)) {
          out.push(`container "${c.name}" sets type "${own.type}" at ${at}.securityContext.seccompProfile.type`);
        }
      } else if (!PROFILE_TYPES.has(podType)) {
        out.push(`container "${c.name}" has no RuntimeDefault or Localhost profile: set` +
          ` ${at}.securityContext.seccompProfile.type or ${specAt}.securityContext.seccompProfile.type`);
      }
    }
    return out;
  }),

  capabilities_restricted: ({ spec, specAt }) => linuxOnly(spec, () =>
    containersOf(spec, specAt).flatMap(({ c, at }) => {
      const caps = c.securityContext?.capabilities;
      const out = (caps?.drop ?? []).includes("ALL") ? [] :
        [`container "${c.name}" must drop ALL at ${at}.securityContext.capabilities.drop`];
      (caps?.add ?? []).forEach((cap, i) => {
        if (cap !== "NET_BIND_SERVICE") {
          out.push(`container "${c.name}" adds ${cap} at ${at}.securityContext.capabilities.add[${i}]`);
        }
      });
      return out;
    })),
};

// The check's name as it appears in a pod name: capabilities_baseline -> capabilities-baseline.
const slug = (check) => check.toLowerCase().replaceAll("_", "-");

// Checks that Kubernetes skips for pods that declare spec.os.name: windows.
function linuxOnly(spec, check) {
  return spec.os?.name === "windows" ? [] : check();
}

// ---- Main.

const args = process.argv.slice(2);
const level = (args.find((a) => a.startsWith("--level="))?.slice("--level=".length)) ?? "baseline";
const expectNames = args.includes("--expect-names");
const files = args.filter((a) => !a.startsWith("--"));
const unknownFlags = args.filter((a) => a.startsWith("--") && !a.startsWith("--level=") && a !== "--expect-names");
if (!["baseline", "restricted"].includes(level) || files.length === 0 || unknownFlags.length) {
  console.error("usage: check-pod-security.mjs [--level=baseline|restricted] [--expect-names] FILE.yaml...");
  process.exit(2);
}
const checks = { ...baselineChecks(level), ...(level === "restricted" ? restrictedChecks : {}) };
const checkNames = [...BASELINE_CHECKS, ...(level === "restricted" ? RESTRICTED_CHECKS : [])]
  .filter((n) => !(level === "restricted" && n === "hostPathVolumes"));

const violations = [];
const passes = [];
const selfTest = [];
const covered = new Set();
for (const file of files) {
  let docs;
  try {
    docs = yaml.loadAll(fs.readFileSync(file, "utf8"));
  } catch (e) {
    console.error(`${file}: cannot read: ${e.message.split("\n")[0]}`);
    process.exit(2);
  }
  let pods = 0;
  for (const obj of docs) {
    const route = TEMPLATE_PATH[obj?.kind];
    if (!route) continue;
    const template = route.reduce((o, k) => o?.[k], obj);
    const base = route.join(".");
    const where = `${file}: ${obj.kind}/${obj.metadata?.name}`;
    if (!template?.spec) {
      console.error(`${where}: no pod spec at ${base || "."}${base ? "." : ""}spec`);
      process.exit(2);
    }
    pods++;
    const pod = { meta: template.metadata, spec: template.spec,
      metaAt: base ? `${base}.metadata` : "metadata", specAt: base ? `${base}.spec` : "spec" };
    const failed = new Set();
    for (const name of checkNames) {
      for (const what of checks[name](pod)) {
        violations.push(`${where}: ${name}: ${what}`);
        failed.add(slug(name));
      }
    }
    if (failed.size === 0) passes.push(`${where} passes ${level}`);
    if (expectNames) {
      const m = /^violates-(.+?)(--.*)?$/.exec(obj.metadata?.name ?? "");
      const want = m ? m[1] : null;
      if (want) covered.add(want);
      const got = [...failed].sort().join(", ") || "nothing";
      if (want ? got !== want : failed.size > 0) {
        selfTest.push(`${where}: expected ${want ?? "nothing"}, failed ${got}`);
      }
    }
  }
  if (pods === 0) {
    console.error(`${file}: no pod spec in it (kinds: ${Object.keys(TEMPLATE_PATH).join(", ")})`);
    process.exit(2);
  }
}

if (expectNames) {
  const known = new Set(checkNames.map(slug));
  for (const name of checkNames) {
    if (!covered.has(slug(name))) selfTest.push(`no object named violates-${slug(name)}`);
  }
  for (const c of covered) if (!known.has(c)) selfTest.push(`violates-${c}: no ${level} check of that name`);
  for (const line of selfTest) console.log(line);
  if (selfTest.length) process.exit(1);
  console.log(`${files.join(" ")}: every object fails exactly the ${level} check its name expects;` +
    ` all ${checkNames.length} checks covered`);
  process.exit(0);
}
for (const line of violations) console.log(line);
if (violations.length) process.exit(1);
for (const line of passes) console.log(line);
