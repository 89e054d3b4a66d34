import { execFileSync } from "node:child_process";
import { describe, expect, it } from "vitest";
import { commandLines, displayPath, forgotLine, grantCommands, shellQuote } from "../demo/closing.js";

const place = {
  root: "/home/me/.local/state/loopctl/grants",
  project: "/work/repo/.loopctl-demo",
  cwd: "/work/repo",
  defaultRoot: "/home/me/.local/state/loopctl/grants",
  defaultProject: "/work/repo/.loopctl-demo",
};

describe("the demo's closing commands", () => {
  it("leave out what the defaults say, and write paths inside the checkout relative to it", () => {
    expect(grantCommands(place)).toEqual({
      list: ["npm", "run", "cli", "--", "grants", "list", ["--project", ".loopctl-demo"]],
      reset: ["npm", "run", "demo", "--", "--reset"],
    });
    expect(grantCommands({ ...place, root: "/tmp/state", project: "/srv/site" })).toEqual({
      list: ["npm", "run", "cli", "--", "grants", "list", ["--root", "/tmp/state"], ["--project", "/srv/site"]],
      reset: ["npm", "run", "demo", "--", ["--root", "/tmp/state"], ["--project", "/srv/site"], "--reset"],
    });
    expect(displayPath("/work/repo", "/work/repo")).toBe("/work/repo");
    expect(displayPath("/work/repo-2/x", "/work/repo")).toBe("/work/repo-2/x");
  });

  it("quote every word so that a shell reads it back unchanged", () => {
    const words = ["plain/path-1.2", "with space", "it's", "$HOME", "`id`", "a\\b", "*", "", "--x=y", "ünï"];
    expect(shellQuote("plain/path-1.2")).toBe("plain/path-1.2");
    const printed = execFileSync("sh", ["-c", `printf '%s\\n' ${words.map(shellQuote).join(" ")}`], {
      encoding: "utf8",
    });
    expect(printed).toBe(words.map((w) => `${w}\n`).join(""));
  });

  it("fit the width, an option beside its value, continued with backslashes that a shell joins", () => {
    const parts = [
      "printf",
      "%s\\n",
      ["--root", "/tmp/a folder/with a long name/state"],
      ["--project", ".loopctl-demo"],
      "end",
    ] as const;
    expect(commandLines("  see them:  ", parts, 200)).toEqual([
      "  see them:  printf '%s\\n' --root '/tmp/a folder/with a long name/state' --project .loopctl-demo end",
    ]);
    const lines = commandLines("  see them:  ", parts, 60);
    expect(lines).toEqual([
      "  see them:",
      "    printf '%s\\n' \\",
      "      --root '/tmp/a folder/with a long name/state' \\",
      "      --project .loopctl-demo end",
    ]);
    for (const line of lines) expect(line.length).toBeLessThanOrEqual(60);
    const printed = execFileSync("sh", ["-c", lines.slice(1).join("\n")], { encoding: "utf8" });
    expect(printed).toBe(
      ["--root", "/tmp/a folder/with a long name/state", "--project", ".loopctl-demo", "end", ""].join("\n"),
    );
  });

  it('say what --reset forgot in words that fit the count, never "grant(s)"', () => {
    expect(forgotLine(0)).toBe("nothing to forget: no grant was remembered for this project");
    expect(forgotLine(1)).toBe("forgot 1 grant of this project");
    expect(forgotLine(2)).toBe("forgot 2 grants of this project");
  });
});
