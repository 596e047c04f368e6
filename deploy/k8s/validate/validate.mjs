#!/usr/bin/env node
// Checks rendered Kubernetes manifests offline against the API schemas bundled in the
// npm package kubernetes-models (pinned in package-lock.json): the kind must exist in its
// apiVersion, every field must have the right type, every required field must be present.
//
// The schemas accept fields they do not declare (as the API server's non-strict decoding
// does), so a misspelled field would pass. The strict check here finds those: for every
// field of the object it asks the compiled schema whether the field is declared, by
// putting a value there that no declared field accepts (an array holding an empty array:
// wrong for strings, numbers, booleans, objects, and for the items of any array) and
// seeing whether the schema reports an error at that path. A field that draws no error is
// undeclared. (A field declared as "any value" would be reported too; the core APIs used
// here have none.)
//
// Kinds that custom resource definitions add (LeaderWorkerSet, ...) are not in
// kubernetes-models: their schemas are vendored under schemas/, one JSON file per kind named
// GROUP_VERSION_KIND.json (made by crd-to-schema.mjs from the CRD the project publishes),
// and checked with Ajv the same way, plus the same strict check. Two things of Kubernetes'
// structural schemas are made explicit for that: `x-kubernetes-int-or-string` becomes
// "an integer or a string" (the API server enforces it; JSON Schema alone would accept
// anything), and the object's own metadata, which a CRD declares only as "an object", is
// checked against kubernetes-models' ObjectMeta.
//
// Usage: node validate.mjs FILE...   (multi-document YAML; exit 1 on any problem)
import { existsSync, readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import Ajv from "ajv";
import { formats } from "@kubernetes-models/validate";
import { ObjectMeta } from "@kubernetes-models/apimachinery/apis/meta/v1/ObjectMeta";

const schemaDir = new URL("./schemas/", import.meta.url);

// A validator is a function from an object to its schema errors (Ajv's shape: instancePath,
// message, params), empty when the object is valid.
function modelErrors(model, object) {
  try {
    new model(object).validate();
    return [];
  } catch (error) {
    if (Array.isArray(error.errors)) return error.errors;
    throw error;
  }
}

function withIntOrString(node) {
  if (Array.isArray(node)) return node.map(withIntOrString);
  if (node === null || typeof node !== "object") return node;
  const copy = Object.fromEntries(Object.entries(node).map(([key, value]) => [key, withIntOrString(value)]));
  if (copy["x-kubernetes-int-or-string"] === true && copy.type === undefined) {
    copy.anyOf = [{ type: "integer" }, { type: "string" }];
  }
  return copy;
}

let ajv = null;
function customResourceValidator(apiVersion, kind) {
  const file = new URL(`${apiVersion.replace("/", "_")}_${kind}.json`, schemaDir);
  if (!apiVersion.includes("/") || !existsSync(file)) return null;
  if (ajv === null) {
    // strict off: the schemas carry Kubernetes' x-kubernetes-* keywords, which only the API
    // server acts on (besides int-or-string, handled above).
    ajv = new Ajv({ allErrors: true, strict: false, formats });
  }
  const { ["x-coil-source"]: _source, ...schema } = JSON.parse(readFileSync(file, "utf8"));
  const check = ajv.compile(withIntOrString(schema));
  return (object) => {
    const errors = check(object) ? [] : [...check.errors];
    const metadata = object?.metadata;
    if (metadata !== null && typeof metadata === "object" && !Array.isArray(metadata)) {
      for (const error of modelErrors(ObjectMeta, metadata)) {
        errors.push({ ...error, instancePath: "/metadata" + error.instancePath });
      }
    }
    return errors;
  };
}

async function validatorFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string" || !/^[\w./-]+$/.test(apiVersion) ||
      !/^\w+$/.test(kind)) {
    return null;
  }
  const custom = customResourceValidator(apiVersion, kind);
  if (custom) return custom;
  let module;
  try {
    module = await import(`kubernetes-models/${apiVersion}`);
  } catch {
    return null;
  }
  const model = module[kind];
  // The modules also export nested types (DeploymentSpec, ...), which have no kind.
  if (!model || model.kind !== kind || model.apiVersion !== apiVersion) return null;
  return (object) => modelErrors(model, object);
}

const pointer = (path) => "/" + path.map((p) => String(p).replace(/~/g, "~0").replace(/\//g, "~1")).join("/");

function withValueAt(object, path, value) {
  const copy = structuredClone(object);
  let node = copy;
  for (const key of path.slice(0, -1)) node = node[key];
  node[path[path.length - 1]] = value;
  return copy;
}

function undeclaredFields(schemaErrors, object) {
  const found = [];
  const visit = (value, path) => {
    if (Array.isArray(value)) {
      value.forEach((item, i) => visit(item, [...path, i]));
      return;
    }
    if (value === null || typeof value !== "object") return;
    for (const key of Object.keys(value)) {
      const fieldPath = [...path, key];
      const at = pointer(fieldPath);
      const errors = schemaErrors(withValueAt(object, fieldPath, [[]]));
      const declared = errors.some((e) => e.instancePath === at || e.instancePath.startsWith(at + "/"));
      if (declared) {
        visit(value[key], fieldPath);
      } else {
        found.push(at);
      }
    }
  };
  visit(object, []);
  return found;
}

async function checkObject(object) {
  const problems = [];
  if (object === null || typeof object !== "object" || Array.isArray(object)) {
    return ["the document is not a mapping"];
  }
  const schemaErrors = await validatorFor(object.apiVersion, object.kind);
  if (!schemaErrors) {
    return [`kind "${object.kind}" does not exist in apiVersion "${object.apiVersion}"`];
  }
  for (const error of schemaErrors(object)) {
    problems.push(`${error.instancePath || "/"}: ${error.message ?? error.keyword} ${JSON.stringify(error.params)}`);
  }
  for (const field of undeclaredFields(schemaErrors, object)) {
    problems.push(`${field}: unknown field (not in the ${object.apiVersion} ${object.kind} schema)`);
  }
  return problems;
}

let failed = false;
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node validate.mjs FILE...");
  process.exit(2);
}
for (const file of files) {
  const documents = parseAllDocuments(readFileSync(file, "utf8"), { uniqueKeys: true });
  for (const [index, document] of documents.entries()) {
    const where = `${file} (document ${index + 1})`;
    if (document.errors.length > 0) {
      failed = true;
      for (const error of document.errors) console.log(`${where}: YAML: ${error.message}`);
      continue;
    }
    const object = document.toJS();
    if (object === null || object === undefined) continue;  // an empty document
    const name = `${object.kind}/${object.metadata?.name ?? "?"}`;
    const problems = await checkObject(object);
    if (problems.length === 0) {
      console.log(`${where}: ${name}: ok`);
    } else {
      failed = true;
      for (const problem of problems) console.log(`${where}: ${name}: ${problem}`);
    }
  }
}
process.exit(failed ? 1 : 0);
