/**
 * Writes one JSON Schema file per zod schema the package exports
 * (`<Name>Schema` → `docs/schemas/<Name>.schema.json`).
 *
 * Run with `npm run schemas`; `test/schemas.test.ts` fails when a file here is stale.
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { renderSchemas } from "./render.js";

const dir = fileURLToPath(new URL(".", import.meta.url));
mkdirSync(dir, { recursive: true });
for (const [file, text] of renderSchemas()) {
  writeFileSync(new URL(file, import.meta.url), text);
  console.log(`wrote docs/schemas/${file}`);
}
