import { existsSync, readFileSync, readdirSync, statSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const repo = fileURLToPath(new URL("..", import.meta.url));
const REPO_URL = "https://github.com/loopctl/loopctl";

/** Every link target in a Markdown text, code blocks and code spans left out. */
function linkTargets(markdown: string): string[] {
  const prose = markdown.replace(/```[\s\S]*?```/g, "").replace(/`[^`\n]*`/g, "");
  const inline = [...prose.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1] as string);
  const references = [...prose.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)/gm)].map((m) => m[1] as string);
  const html = [...prose.matchAll(/\b(?:href|src)\s*=\s*["']([^"']+)["']/g)].map((m) => m[1] as string);
  return [...inline, ...references, ...html];
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces as dashes. */
function anchors(markdown: string): Set<string> {
  const headings = markdown.replace(/```[\s\S]*?```/g, "").matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm);
  return new Set(
    [...headings].map((m) =>
      (m[1] as string)
        .toLowerCase()
        .replace(/[^\p{L}\p{N}\s_-]/gu, "")
        .replace(/\s/g, "-"),
    ),
  );
}

/**
 * Why `path#anchor` (a path in the repository) is not a link that works, or
 * `undefined` when it is: the file or folder must exist, a folder is linked
 * as one (`tree/`, `folder` is `true`), and an anchor must name a heading.
 */
function brokenTarget(path: string, anchor: string | undefined, folder?: boolean): string | undefined {
  const file = join(repo, path);
  if (!existsSync(file)) return `${path} does not exist`;
  if (folder !== undefined && statSync(file).isDirectory() !== folder) return "blob/ is for files, tree/ for folders";
  if (anchor !== undefined && !anchors(readFileSync(file, "utf8")).has(anchor))
    return `${path} has no heading #${anchor}`;
  return undefined;
}

/** Why an absolute link into this repository does not work, or `undefined`; `null` for a link elsewhere. */
function brokenRepoLink(target: string): string | undefined | null {
  if (!target.startsWith(`${REPO_URL}/`)) return null;
  const match = /^https:\/\/github\.com\/loopctl\/loopctl\/(blob|tree)\/main\/([^#?]+)(?:#(.+))?$/.exec(target);
  if (match === null) return "not a blob/ or tree/ link on main";
  const [, kind, path, anchor] = match;
  return brokenTarget(decodeURIComponent(path as string), anchor, kind === "tree");
}

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const targets = linkTargets(readme);

// npm shows the README on the package's page, where a relative link leads nowhere.
describe("README.md links (they must work from the npm page too)", () => {
  it("finds the README's links", () => {
    expect(targets.length).toBeGreaterThan(20);
    expect(linkTargets('[a](docs/a.md)\n[b]: ./b.md\n<a href="c.md">c</a>\n`[d](d.md)`')).toEqual([
      "docs/a.md",
      "./b.md",
      "c.md",
    ]);
  });

  it("has no relative link", () => {
    expect(targets.filter((t) => !/^(https:\/\/|mailto:)/.test(t))).toEqual([]);
  });

  it("points only at files and folders that exist on main, and at headings that exist in them", () => {
    const intoRepo = targets.filter((t) => t.startsWith(`${REPO_URL}/`));
    expect(intoRepo.length).toBeGreaterThan(20);
    for (const target of intoRepo) expect(brokenRepoLink(target), target).toBeUndefined();
  });

  it("lists every page of docs/ in its Documentation index", () => {
    const index = /^## Documentation\n([\s\S]*?)^## /m.exec(readme)?.[1] ?? "";
    const pages = readdirSync(join(repo, "docs")).filter((name) => name.endsWith(".md"));
    expect(pages.filter((page) => !index.includes(`${REPO_URL}/blob/main/docs/${page})`))).toEqual([]);
  });

  it("uses the repository named in package.json", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as {
      repository: { type: string; url: string };
      homepage: string;
      bugs: { url: string };
      author: string;
    };
    expect(pkg.repository).toEqual({ type: "git", url: `git+${REPO_URL}.git` });
    expect(pkg.homepage).toBe(`${REPO_URL}#readme`);
    expect(pkg.bugs).toEqual({ url: `${REPO_URL}/issues` });
    expect(pkg.author).toBe("loopctl maintainers");
  });
});

// On GitHub the docs are read page by page; a link that leads nowhere is a dead end for the reader.
describe("docs/*.md and CHANGELOG.md links", () => {
  const pages = readdirSync(join(repo, "docs"))
    .filter((name) => name.endsWith(".md"))
    .map((name) => `docs/${name}`)
    .concat("CHANGELOG.md");

  it("finds the pages and their links", () => {
    expect(pages.length).toBeGreaterThan(10);
    expect(brokenTarget("docs/grants.md", "the-cli")).toBeUndefined();
    expect(brokenTarget("docs/grants.md", "no-such-heading")).toBe("docs/grants.md has no heading #no-such-heading");
    expect(brokenTarget("docs/nothing.md", undefined)).toBe("docs/nothing.md does not exist");
  });

  it.each(pages)("%s: every relative link leads to a file, a folder or a heading that exists", (page) => {
    const text = readFileSync(join(repo, page), "utf8");
    const broken: string[] = [];
    for (const target of linkTargets(text)) {
      if (/^[a-z][a-z+.-]*:/i.test(target)) continue; // https:, mailto: (absolute ones are checked below)
      const [path = "", anchor] = target.split("#", 2) as [string, string | undefined];
      const into = path === "" ? page : relative(repo, join(repo, dirname(page), decodeURIComponent(path)));
      const why = into.startsWith("..") ? "leads out of the repository" : brokenTarget(into, anchor);
      if (why !== undefined) broken.push(`${target}: ${why}`);
    }
    expect(broken).toEqual([]);
  });

  it.each(pages)("%s: every absolute link into this repository leads to something on main", (page) => {
    const text = readFileSync(join(repo, page), "utf8");
    const broken = linkTargets(text)
      .map((target) => [target, brokenRepoLink(target)] as const)
      .filter(([, why]) => why !== null && why !== undefined)
      .map(([target, why]) => `${target}: ${String(why)}`);
    expect(broken).toEqual([]);
  });
});
