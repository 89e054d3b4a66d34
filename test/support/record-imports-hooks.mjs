// Module hooks (they run off the main thread): record each resolved URL.
import { appendFileSync } from "node:fs";

const log = process.env.LOOPCTL_IMPORT_LOG;

export async function resolve(specifier, context, next) {
  const result = await next(specifier, context);
  if (log !== undefined) appendFileSync(log, `${result.url}\n`);
  return result;
}
