// A test that needs something of the machine (root, a tmpfs mount) and finds
// it missing: outside CI it is skipped and says why; under CI (which runs as
// root, so every precondition holds there) it fails, so a broken runner can
// never turn the test into a silent pass.
import type { TestContext } from "vitest";

/** Skips the test with `reason` outside CI; under `CI=true` fails it with `reason`. */
export function unmet(context: TestContext, reason: string): never {
  if (process.env["CI"] === "true" || process.env["CI"] === "1") {
    throw new Error(`precondition not met under CI: ${reason}`);
  }
  return context.skip(reason);
}

/** Whether this process runs as root (POSIX); `false` where there are no uids. */
export function isRoot(): boolean {
  return process.getuid?.() === 0;
}
