import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const repo = fileURLToPath(new URL("..", import.meta.url));
const RUST_ORIGINAL = "https://github.com/loopctl/loopctl-rs";

/** What a user reads: the README, the CHANGELOG, every page of docs/ and every example. */
const pages = [
  "README.md",
  "CHANGELOG.md",
  ...readdirSync(join(repo, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`),
  ...readdirSync(join(repo, "examples"))
    .filter((name) => name.endsWith(".ts"))
    .map((name) => `examples/${name}`),
];

const read = (page: string): string => readFileSync(join(repo, page), "utf8");

/** The text without link targets (`](https://semver.org/spec/…)` is an address, not prose). */
const withoutTargets = (text: string): string =>
  text.replace(/\]\([^)\s]*\)/g, "]()").replace(/<https?:\/\/[^>]*>/g, "");

/** Lines citing a behaviour contract the reader does not have: "the spec's", "spec section 3", "§5". */
function specCitations(text: string): string[] {
  return withoutTargets(text)
    .split("\n")
    .filter((line) => /\bspec(?:'s|s)?\b|§|\bsections? \d/i.test(line));
}

/** File paths of Rust sources (`a.rs`), which say nothing to a TypeScript reader. */
function rustPaths(text: string): string[] {
  return [...text.matchAll(/[\w./-]+\.rs\b(?!\.\w)/g)].map((m) => m[0]);
}

/** Each mention of the Rust original that is not linked to it within the next 80 characters. */
function unlinkedRust(text: string): string[] {
  const first = /\bRust\b/.exec(text);
  if (first === null) return [];
  const near = text.slice(first.index, first.index + 80);
  return near.includes(`](${RUST_ORIGINAL})`) ? [] : [near.split("\n").join(" ")];
}

describe("what users read cites only what they can read", () => {
  it("finds the pages, and the checks find what they look for", () => {
    expect(pages).toContain("docs/grants.md");
    expect(pages).toContain("examples/remember-with-grants.ts");
    expect(
      specCitations(
        "as spec section 4 says\nthe spec's order\nsee approvals.md §3\nfine\n[semver](https://semver.org/spec/v2.0.0.html)",
      ),
    ).toEqual(["as spec section 4 says", "the spec's order", "see approvals.md §3"]);
    expect(rustPaths('read {path:"a.rs"}, src/grant/store.rs; trust.rs.md is not, nor rust')).toEqual([
      "a.rs",
      "src/grant/store.rs",
    ]);
    expect(unlinkedRust("the Rust original says")).toEqual(["Rust original says"]);
    expect(unlinkedRust(`the Rust original ([loopctl-rs](${RUST_ORIGINAL})) says`)).toEqual([]);
    expect(unlinkedRust("we trust it")).toEqual([]);
  });

  it.each(pages)("%s: no citation of a spec, its sections or its paragraphs", (page) => {
    expect(specCitations(read(page))).toEqual([]);
  });

  it.each(pages)("%s: no .rs path, in prose or examples", (page) => {
    expect(rustPaths(read(page))).toEqual([]);
  });

  it.each(pages)("%s: the Rust original, where it is named, is linked where it is first named", (page) => {
    expect(unlinkedRust(read(page))).toEqual([]);
  });
});
