// values.schema.json under ajv (draft-07, strict mode: the schema itself must
// be clean), against merged values sets (helmrender --dump-values output):
// GOOD files must pass, BAD files must fail, each error printed as ajv words it.
// usage: node check_values_schema.mjs NODE_DIR SCHEMA good:FILE... bad:FILE...
import { createRequire } from "node:module";
import fs from "node:fs";
import path from "node:path";

const [nodeDir, schemaFile, ...sets] = process.argv.slice(2);
const require = createRequire(path.join(path.resolve(nodeDir), "package.json"));
const Ajv = require("ajv");
const ajv = new Ajv({ allErrors: true, strict: true });
const validate = ajv.compile(JSON.parse(fs.readFileSync(schemaFile, "utf8")));
let failures = 0;
for (const s of sets) {
  const [want, file] = [s.slice(0, s.indexOf(":")), s.slice(s.indexOf(":") + 1)];
  const ok = validate(JSON.parse(fs.readFileSync(file, "utf8")));
  const msgs = (validate.errors ?? []).map((e) => `${e.instancePath || "/"} ${e.message}`).join("; ");
  if (ok !== (want === "good")) {
    console.error(`FAIL ajv: ${path.basename(file)} expected ${want}, got ${ok ? "valid" : "invalid: " + msgs}`);
    failures++;
  } else {
    console.log(`ajv: ${path.basename(file)}: ${ok ? "valid" : "rejected: " + msgs}`);
  }
}
process.exit(failures ? 1 : 0);
