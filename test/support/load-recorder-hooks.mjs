import { appendFileSync } from "node:fs";

export async function resolve(specifier, context, next) {
  const resolved = await next(specifier, context);
  appendFileSync(process.env.LOOPCTL_LOAD_LOG, `${resolved.url}\n`);
  return resolved;
}
