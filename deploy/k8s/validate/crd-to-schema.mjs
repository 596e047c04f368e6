#!/usr/bin/env node
// Turns a CustomResourceDefinition (YAML, as a project publishes it) into the JSON schema
// validate.mjs checks that kind against: the openAPIV3Schema of one served version, with
// the descriptions dropped (they are most of the bytes and none of the checking).
//
// Usage: node crd-to-schema.mjs CRD.yaml VERSION > schemas/GROUP_VERSION_KIND.json
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const [file, version] = process.argv.slice(2);
if (!file || !version) {
  console.error("usage: node crd-to-schema.mjs CRD.yaml VERSION");
  process.exit(2);
}
const crd = parseAllDocuments(readFileSync(file, "utf8"))
  .map((document) => document.toJS())
  .find((object) => object?.kind === "CustomResourceDefinition");
if (!crd) {
  console.error(`${file}: no CustomResourceDefinition in it`);
  process.exit(1);
}
const served = crd.spec.versions.find((v) => v.name === version);
if (!served?.schema?.openAPIV3Schema) {
  console.error(`${file}: version ${version} has no openAPIV3Schema`);
  process.exit(1);
}
const strip = (node) => {
  if (Array.isArray(node)) return node.map(strip);
  if (node === null || typeof node !== "object") return node;
  return Object.fromEntries(
    Object.entries(node).filter(([key]) => key !== "description").map(([key, value]) => [key, strip(value)]));
};
const schema = {
  "x-coil-source": {
    group: crd.spec.group,
    kind: crd.spec.names.kind,
    version,
    crd: crd.metadata.name,
  },
  ...strip(served.schema.openAPIV3Schema),
};
process.stdout.write(JSON.stringify(schema) + "\n");
