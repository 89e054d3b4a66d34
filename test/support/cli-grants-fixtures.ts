import { mkdir, mkdtemp } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { FileGrantStore, Grant, GrantScope } from "../../src/grant/index.js";

/** A fresh grant root and project folder under a new temp folder. */
export async function tempProject(): Promise<{ base: string; root: string; project: string }> {
  const base = await mkdtemp(join(tmpdir(), "loopctl-cli-grants-"));
  const root = join(base, "grants-root");
  const project = join(base, "project");
  await mkdir(project, { recursive: true });
  return { base, root, project };
}

/** Three grants: allow read (whole tool), deny shell for one call, allow write pinned. */
export function sampleGrants(): Grant[] {
  return [
    new Grant("read", "allow", GrantScope.thisTool()).withCreatedAtMs(Date.UTC(2026, 0, 2, 3, 4, 5)),
    new Grant("shell", "deny", GrantScope.thisCall({ cmd: "rm -rf /", cwd: "/" })).withNote("never"),
    new Grant("write", "allow", GrantScope.thisTool()).withPinnedDescriptor(`sha256:${"ab".repeat(32)}`),
  ];
}

/** Saves `grants` into the ledger of (root, project) and returns the store. */
export async function seed(root: string, project: string, grants: readonly Grant[]): Promise<FileGrantStore> {
  const store = new FileGrantStore(root, project);
  for (const grant of grants) await store.save(grant);
  return store;
}
