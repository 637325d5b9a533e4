// Validates rendered manifests (helmrender output) against the Kubernetes and
// Prometheus Operator schemas: each object through its kubernetes-models /
// @kubernetes-models/prometheus-operator model's validate() (JSON Schema:
// types, required fields, enums), then all of them as TypeScript object
// literals `satisfies` the models' interfaces, which also rejects unknown
// field names (the JSON Schemas allow them). A Kubeflow PyTorchJob has no
// model: its pod templates are checked as PodTemplateSpecs and its top level
// against the training operator's v1 fields written out below.
// usage: node validate_manifests.mjs NODE_DIR RENDERED.yaml...
import { createRequire } from "node:module";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { pathToFileURL } from "node:url";

const [nodeDir, ...files] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(nodeDir), "package.json"));
const yaml = require("js-yaml");

function modelPath(apiVersion, kind) {
  if (apiVersion.startsWith("monitoring.coreos.com/")) {
    return `@kubernetes-models/prometheus-operator/${apiVersion}/${kind}`;
  }
  return `kubernetes-models/${apiVersion}/${kind}`;
}

const PYTORCHJOB_TS = `
// Kubeflow training operator, kubeflow.org/v1 PyTorchJob (the fields it defines).
interface IRunPolicy { cleanPodPolicy?: "All" | "Running" | "None"; ttlSecondsAfterFinished?: number;
  activeDeadlineSeconds?: number; backoffLimit?: number; schedulingPolicy?: object; suspend?: boolean;
  managedBy?: string; }
interface IReplicaSpec { replicas?: number; template?: Json<IPodTemplateSpec>;
  restartPolicy?: "Always" | "OnFailure" | "Never" | "ExitCode"; }
interface IPyTorchJob { apiVersion: "kubeflow.org/v1"; kind: "PyTorchJob"; metadata?: Json<IObjectMeta>;
  spec: { runPolicy?: IRunPolicy; elasticPolicy?: object; nprocPerNode?: string;
    pytorchReplicaSpecs: { Master?: IReplicaSpec; Worker?: IReplicaSpec } }; }
`;

let failures = 0;
const ts = [
  "type Json<T> = T extends string ? `${T}` : T extends (infer U)[] ? Json<U>[]",
  "  : T extends object ? { [K in keyof T]: Json<T[K]> } : T;",
  'import type { IPodTemplateSpec } from "kubernetes-models/v1/PodTemplateSpec";',
  'import type { IObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";',
  PYTORCHJOB_TS,
];
const imported = new Set();
let n = 0;
for (const file of files) {
  const docs = yaml.loadAll(fs.readFileSync(file, "utf8")).filter((d) => d != null);
  for (const doc of docs) {
    const where = `${path.basename(file)}: ${doc.kind} ${doc.metadata?.name}`;
    n++;
    if (!doc.apiVersion || !doc.kind) {
      console.error(`FAIL ${where}: no apiVersion/kind`);
      failures++;
      continue;
    }
    const id = `m${n}`;
    if (doc.apiVersion === "kubeflow.org/v1" && doc.kind === "PyTorchJob") {
      const { PodTemplateSpec } = require("kubernetes-models/v1/PodTemplateSpec");
      for (const [role, spec] of Object.entries(doc.spec?.pytorchReplicaSpecs ?? {})) {
        try {
          new PodTemplateSpec(spec.template).validate();
        } catch (e) {
          console.error(`FAIL ${where} ${role} template: ${e.message}`);
          failures++;
        }
      }
      ts.push(`export const ${id} = ${JSON.stringify(doc)} satisfies IPyTorchJob; // ${where}`);
      continue;
    }
    const mp = modelPath(doc.apiVersion, doc.kind);
    let Model;
    try {
      // kubernetes-models is CommonJS; the prometheus-operator models are ES modules only.
      try {
        Model = require(mp)[doc.kind];
      } catch {
        Model = (await import(pathToFileURL(path.join(path.resolve(nodeDir), "node_modules", mp + ".js"))))[doc.kind];
      }
      if (!Model) throw new Error("no model");
    } catch (e) {
      console.error(`FAIL ${where}: no schema for ${doc.apiVersion} ${doc.kind} (${mp})`);
      failures++;
      continue;
    }
    try {
      new Model(doc).validate();
    } catch (e) {
      console.error(`FAIL ${where}: ${e.message}`);
      failures++;
    }
    const iface = `I${doc.kind}`;
    const alias = `${iface}_${doc.apiVersion.replace(/[^A-Za-z0-9]/g, "_")}`;
    if (!imported.has(alias)) {
      ts.push(`import type { ${iface} as ${alias} } from "${mp}";`);
      imported.add(alias);
    }
    ts.push(`export const ${id} = ${JSON.stringify(doc)} satisfies Json<${alias}>; // ${where}`);
  }
}
const tmp = fs.mkdtempSync(path.join(path.resolve(nodeDir), "manifests-"));
const src = path.join(tmp, "manifests.ts");
fs.writeFileSync(src, ts.join("\n") + "\n");
try {
  execFileSync(path.join(path.resolve(nodeDir), "node_modules/.bin/tsc"),
    ["--noEmit", "--strict", "--skipLibCheck", "--target", "es2022", "--module", "nodenext",
     "--moduleResolution", "nodenext", src], { cwd: nodeDir, encoding: "utf8", stdio: "pipe" });
  fs.rmSync(tmp, { recursive: true });
} catch (e) {
  // Name the object each error is in (the line's trailing comment).
  const lines = fs.readFileSync(src, "utf8").split("\n");
  for (const l of (e.stdout + e.stderr).split("\n").filter(Boolean)) {
    const m = l.match(/manifests\.ts\((\d+),/);
    const obj = m ? lines[Number(m[1]) - 1].replace(/^.*\/\/ /, "") : "";
    console.error(`FAIL field check${obj ? " " + obj : ""}: ${l.replace(/^.*manifests\.ts\(\d+,\d+\): /, "")}`);
  }
  failures++;
}
if (failures) {
  console.error(`${failures} manifest check(s) failed`);
  process.exit(1);
}
console.log(`manifests valid: ${n} objects in ${files.length} renders (schemas and field names)`);
