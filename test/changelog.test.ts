import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const changelog = readFileSync(new URL("../CHANGELOG.md", import.meta.url), "utf8");
const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { files: string[] };

/** The kinds of change Keep a Changelog 1.1.0 names. */
const KINDS = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"];

/** Each release (`## [...]`) with its `### Kind` sections and their lines. */
function releases(text: string): { heading: string; sections: { kind: string; lines: string[] }[] }[] {
  return text
    .split(/^## /m)
    .slice(1)
    .map((block) => {
      const [heading = "", ...rest] = block.split("\n");
      const sections = rest
        .join("\n")
        .split(/^### /m)
        .slice(1)
        .map((section) => {
          const [kind = "", ...lines] = section.split("\n");
          return { kind, lines: lines.filter((line) => line.trim() !== "") };
        });
      return { heading, sections };
    });
}

describe("CHANGELOG.md (Keep a Changelog 1.1.0)", () => {
  const found = releases(changelog);

  it("names its format and starts with the unreleased changes", () => {
    expect(changelog.startsWith("# Changelog\n")).toBe(true);
    expect(changelog).toContain("https://keepachangelog.com/en/1.1.0/");
    expect(found[0]?.heading).toBe("[Unreleased]");
  });

  it("titles every release [Unreleased] or [x.y.z] - YYYY-MM-DD", () => {
    expect(
      found
        .map((release) => release.heading)
        .filter((heading) => !/^\[(Unreleased|\d+\.\d+\.\d+)\]( - \d{4}-\d{2}-\d{2})?$/.test(heading)),
    ).toEqual([]);
  });

  it("groups each release's entries under the kinds of change, each kind once, as a list", () => {
    for (const { heading, sections } of found) {
      const kinds = sections.map((section) => section.kind);
      expect(
        kinds.filter((kind) => !KINDS.includes(kind)),
        heading,
      ).toEqual([]);
      expect(new Set(kinds).size, heading).toBe(kinds.length);
      for (const { kind, lines } of sections) {
        expect(lines.length, `${heading} ${kind}`).toBeGreaterThan(0);
        expect(
          lines.filter((line) => !/^(- | {2}\S)/.test(line)),
          `${heading} ${kind}`,
        ).toEqual([]);
      }
    }
  });

  it("ships in the package", () => {
    expect(pkg.files).toContain("CHANGELOG.md");
  });
});
