import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readFile, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { isAbsolute, join, relative, resolve } from "node:path";

/** The scratch folder the demo's tools act on. */
export interface Workspace {
  readonly dir: string;
  /** True when the demo made the folder itself (a temp dir) and should remove it. */
  readonly temporary: boolean;
  /** Resolves `path` inside the workspace; throws for a path that leaves it. */
  inside(path: string): string;
  /** The files in the workspace, relative and sorted, for the closing summary. */
  files(): Promise<string[]>;
  /** Removes a temporary workspace; leaves one the user named alone. */
  dispose(): Promise<void>;
}

const SEED: Record<string, string> = {
  "package.json": `${JSON.stringify({ name: "acme-web", version: "1.3.2", private: true }, null, 2)}\n`,
  "NOTES.md": [
    "# Unreleased",
    "",
    "- Faster cold start: lazy-load the editor bundle",
    "- Fix: session cookie kept after sign-out",
    "- Docs: self-hosting guide",
    "",
  ].join("\n"),
};

/**
 * Opens the workspace: `dir` if given (created and seeded when missing files),
 * else a fresh temp dir. Seed files that already exist are left as they are.
 */
export async function openWorkspace(dir: string | undefined): Promise<Workspace> {
  const temporary = dir === undefined;
  const root = resolve(dir ?? (await mkdtemp(join(tmpdir(), "loopctl-demo-"))));
  await mkdir(root, { recursive: true });
  for (const [name, text] of Object.entries(SEED)) {
    const path = join(root, name);
    if (!existsSync(path)) await writeFile(path, text);
  }
  return {
    dir: root,
    temporary,
    inside(path: string): string {
      const full = resolve(root, path);
      const rel = relative(root, full);
      if (rel === "" || rel.startsWith("..") || isAbsolute(rel)) {
        throw new Error(`path ${JSON.stringify(path)} is outside the workspace`);
      }
      return full;
    },
    async files(): Promise<string[]> {
      const entries = await readdir(root, { recursive: true, withFileTypes: true });
      return entries
        .filter((e) => e.isFile())
        .map((e) => relative(root, join(e.parentPath, e.name)))
        .sort();
    },
    async dispose(): Promise<void> {
      if (temporary) await rm(root, { recursive: true, force: true });
    },
  };
}

/** Reads a workspace file as UTF-8. */
export async function readText(workspace: Workspace, path: string): Promise<string> {
  return readFile(workspace.inside(path), "utf8");
}
