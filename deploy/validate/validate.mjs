// Offline validation of the deployment files.
//   kubectl kustomize DIR | node validate.mjs k8s -    Kubernetes objects
//   node validate.mjs compose FILE                      docker compose file
// Kubernetes objects are checked against the API schemas of the
// kubernetes-models package; LeaderWorkerSet (a CRD it does not know) has its
// fields checked here and its pod templates against the core schema. An
// object of any other unknown kind is an error. Exit 1 on any problem.
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const problems = [];
const fail = (where, what) => problems.push(`${where}: ${what}`);

function read(path) {
  return readFileSync(path === "-" ? 0 : path, "utf8");
}

function documents(text, where) {
  const docs = [];
  // merge: compose files use YAML 1.1 merge keys (<<: *anchor).
  for (const doc of parseAllDocuments(text, { merge: true })) {
    if (doc.errors.length > 0) {
      fail(where, doc.errors.map((e) => e.message).join("; "));
      continue;
    }
    const value = doc.toJS();
    if (value !== null && value !== undefined) docs.push(value);
  }
  return docs;
}

async function schemaCheck(modulePath, className, value, where) {
  let mod;
  try {
    mod = await import(modulePath);
  } catch {
    return false;
  }
  try {
    new mod[className](value).validate();
  } catch (e) {
    fail(where, e.message);
  }
  return true;
}

function checkLeaderWorkerSet(obj, where) {
  const t = obj.spec?.leaderWorkerTemplate;
  if (!t) return fail(where, "spec.leaderWorkerTemplate is required");
  if (!Number.isInteger(t.size) || t.size < 1) {
    fail(where, "spec.leaderWorkerTemplate.size must be an integer >= 1");
  }
  if (obj.spec.replicas !== undefined && (!Number.isInteger(obj.spec.replicas) || obj.spec.replicas < 0)) {
    fail(where, "spec.replicas must be an integer >= 0");
  }
  const policies = ["RecreateGroupOnPodRestart", "None", undefined];
  if (!policies.includes(t.restartPolicy)) fail(where, `unknown restartPolicy ${t.restartPolicy}`);
  if (!t.workerTemplate) fail(where, "spec.leaderWorkerTemplate.workerTemplate is required");
  return t;
}

async function validateK8s(path) {
  const docs = documents(read(path), path);
  if (docs.length === 0) fail(path, "no objects");
  const models = new URL("./node_modules/kubernetes-models/", import.meta.url);
  for (const obj of docs) {
    const where = `${obj.kind ?? "?"}/${obj.metadata?.name ?? "?"}`;
    if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
      fail(where, "apiVersion and kind are required");
      continue;
    }
    if (!obj.metadata?.name) fail(where, "metadata.name is required");
    if (obj.apiVersion === "leaderworkerset.x-k8s.io/v1" && obj.kind === "LeaderWorkerSet") {
      const t = checkLeaderWorkerSet(obj, where);
      for (const name of ["leaderTemplate", "workerTemplate"]) {
        if (t?.[name]) {
          await schemaCheck(new URL("v1/PodTemplateSpec.js", models).href, "PodTemplateSpec",
                            t[name], `${where} ${name}`);
        }
      }
      continue;
    }
    const module = new URL(`${obj.apiVersion}/${obj.kind}.js`, models).href;
    if (!(await schemaCheck(module, obj.kind, obj, where))) {
      fail(where, `no schema for ${obj.apiVersion} ${obj.kind}`);
    }
  }
  return docs.length;
}

function validateCompose(path) {
  const [doc] = documents(read(path), path);
  const services = doc?.services;
  if (!services || typeof services !== "object") return fail(path, "no services");
  for (const [name, s] of Object.entries(services)) {
    const where = `${path} service ${name}`;
    if (typeof s.image !== "string" && !s.build) fail(where, "needs image or build");
    if (s.command !== undefined && !Array.isArray(s.command)) fail(where, "command must be a list");
    for (const dep of s.depends_on ?? []) {
      if (!(dep in services)) fail(where, `depends_on unknown service ${dep}`);
    }
    for (const p of s.ports ?? []) {
      // HOST:CONTAINER, the host port a number or ${VAR:-number}.
      if (!/^(\d+|\$\{\w+:-\d+\})(:\d+)?$/.test(String(p))) fail(where, `bad port mapping ${p}`);
    }
    if (s.profiles !== undefined && !Array.isArray(s.profiles)) fail(where, "profiles must be a list");
  }
  return Object.keys(services).length;
}

const [mode, path] = process.argv.slice(2);
let count = 0;
if (mode === "k8s" && path) {
  count = await validateK8s(path);
} else if (mode === "compose" && path) {
  count = validateCompose(path);
} else {
  console.error("usage: node validate.mjs k8s FILE|- | compose FILE");
  process.exit(64);
}
if (problems.length > 0) {
  for (const p of problems) console.error(`invalid: ${p}`);
  process.exit(1);
}
console.log(`${mode}: ${count} objects valid`);
