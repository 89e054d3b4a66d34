// File-system helpers for the crash and hostile-file tests.
import { lstatSync, readdirSync } from "node:fs";
import { join, relative } from "node:path";

export interface Entry {
  readonly path: string;
  readonly kind: "dir" | "file" | "symlink" | "other";
  readonly mode: number;
}

/** Every entry under `root` (root included), without following symlinks. */
export function walk(root: string): Entry[] {
  const out: Entry[] = [];
  const visit = (path: string): void => {
    const stat = lstatSync(path);
    const kind = stat.isDirectory() ? "dir" : stat.isFile() ? "file" : stat.isSymbolicLink() ? "symlink" : "other";
    out.push({ path: relative(root, path) || ".", kind, mode: stat.mode & 0o7777 });
    if (kind === "dir") for (const name of readdirSync(path)) visit(join(path, name));
  };
  visit(root);
  return out;
}

/** Entries a group member or anyone else could read, write or enter. */
export function openToOthers(root: string): string[] {
  return walk(root)
    .filter((e) => (e.mode & 0o077) !== 0)
    .map((e) => `${e.path} (${e.kind}, ${e.mode.toString(8)})`);
}
