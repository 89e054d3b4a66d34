import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach } from "vitest";
import { FileGrantStore, Grant, GrantScope } from "../../src/grant/index.js";

/** A temp folder holding a grant root and a project folder. */
export interface TempProject {
  readonly base: string;
  readonly root: string;
  readonly project: string;
}

/** A fresh grant root and project folder under a new temp folder. */
export async function tempProject(): Promise<TempProject> {
  const base = await mkdtemp(join(tmpdir(), "loopctl-cli-grants-"));
  const root = join(base, "grants-root");
  const project = join(base, "project");
  await mkdir(project, { recursive: true });
  return { base, root, project };
}

/** A fresh {@link tempProject} for each test, handed to `use`, and removed after it. */
export function useTempProject(use: (made: TempProject) => void): void {
  let made: TempProject | undefined;
  beforeEach(async () => {
    made = await tempProject();
    use(made);
  });
  afterEach(async () => {
    if (made !== undefined) await rm(made.base, { recursive: true, force: true });
  });
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
