import { z } from "zod";
import * as loopctl from "../../src/index.js";

/** Every exported `…Schema` zod value, rendered as `[fileName, jsonText]`, sorted by name. */
export function renderSchemas(): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [name, value] of Object.entries(loopctl).sort(([a], [b]) => (a < b ? -1 : 1))) {
    if (!name.endsWith("Schema") || !(value instanceof z.ZodType)) continue;
    const title = name.slice(0, -"Schema".length);
    const schema = { title, ...z.toJSONSchema(value, { io: "input", unrepresentable: "any" }) };
    out.push([`${title}.schema.json`, `${JSON.stringify(schema, null, 2)}\n`]);
  }
  return out;
}
