import { existsSync, readFileSync, statSync } from "node:fs";
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

const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
const targets = linkTargets(readme);

// npm shows the README on the package's page, where a relative link leads nowhere.
describe("README.md links (they must work from the npm page too)", () => {
  it("finds the README's links", () => {
    expect(targets.length).toBeGreaterThan(20);
    expect(linkTargets("[a](docs/a.md)\n[b]: ./b.md\n<a href=\"c.md\">c</a>\n`[d](d.md)`")).toEqual(["docs/a.md", "./b.md", "c.md"]);
  });

  it("has no relative link", () => {
    expect(targets.filter((t) => !/^(https:\/\/|mailto:)/.test(t))).toEqual([]);
  });

  it("points only at files and folders that exist on main, and at headings that exist in them", () => {
    const intoRepo = targets.filter((t) => t.startsWith(`${REPO_URL}/`));
    expect(intoRepo.length).toBeGreaterThan(20);
    for (const target of intoRepo) {
      const match = /^https:\/\/github\.com\/loopctl\/loopctl\/(blob|tree)\/main\/([^#?]+)(?:#(.+))?$/.exec(target);
      expect(match, `${target} is not a blob/ or tree/ link on main`).not.toBeNull();
      const [, kind, path, anchor] = match as RegExpExecArray;
      const file = `${repo}${decodeURIComponent(path as string)}`;
      expect(existsSync(file), `${target}: ${path} does not exist`).toBe(true);
      expect(statSync(file).isDirectory(), `${target}: blob/ is for files, tree/ for folders`).toBe(kind === "tree");
      if (anchor !== undefined) expect(anchors(readFileSync(file, "utf8")), target).toContain(anchor);
    }
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
