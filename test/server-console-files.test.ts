import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const file = (name: string): string => readFileSync(new URL(`../src/server/console/${name}`, import.meta.url), "utf8");

// The browser tests show the page renders hostile text as text; these keep
// the ways it could stop doing so out of the source altogether.
describe("the console's static files", () => {
  it("console.js never turns text into markup or code", () => {
    const js = file("console.js");
    for (const sink of [
      "innerHTML",
      "outerHTML",
      "insertAdjacentHTML",
      "document.write",
      "eval(",
      "new Function",
      "setHTMLUnsafe",
      "createContextualFragment",
    ]) {
      expect(js, sink).not.toContain(sink);
    }
    expect(js).toContain("textContent");
  });

  it("console.js marks the look-alike letters by the rule the link pages and the CLI share", () => {
    // console.js runs in the browser on its own, so it keeps its own copy of src/look-alike.ts's rule.
    const js = file("console.js");
    const shared = readFileSync(new URL("../src/look-alike.ts", import.meta.url), "utf8");
    const take = (text: string, pattern: RegExp): string => pattern.exec(text)?.[1] ?? `no match for ${pattern}`;
    expect(take(js, /const WORD = (\/.+\/gu);/)).toBe(take(shared, /const WORD = (\/.+\/gu);/));
    expect(take(js, /const LATIN = (\/.+\/u);/)).toBe(take(shared, /const LATIN = (\/.+\/u);/));
    expect(take(js, /const LOOK_ALIKE =\s*\/(\[.+\])\/u;/)).toBe(
      take(shared, /const SCRIPTS = String\.raw`(\[.+\])`;/),
    );
  });

  it("index.html has no inline script, inline style or event-handler attribute (the CSP would refuse them)", () => {
    const html = file("index.html");
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)[^>]*>/);
    expect(html).not.toMatch(/<style/);
    expect(html).not.toMatch(/\sstyle=/);
    expect(html).not.toMatch(/\son[a-z]+=/);
    expect(html).toMatch(/<script src="console.js" defer><\/script>/);
    expect(html).toMatch(/<link rel="stylesheet" href="console.css">/);
  });

  it("loads everything by relative URL, so the console works mounted under any path", () => {
    const html = file("index.html");
    const js = file("console.js");
    expect(html).not.toMatch(/(href|src)="\//);
    expect(js).not.toMatch(/(fetch|api|EventSource)\(\s*["`]\//);
  });
});
