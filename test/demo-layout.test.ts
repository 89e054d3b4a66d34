import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_WIDTH, clip, outputWidth, visibleLength, wrap } from "../demo/layout.js";
import { makeStyle } from "../demo/style.js";

const strip = (text: string): string => text.replace(/\u001b\[[0-9;]*m/g, "");

describe("demo layout", () => {
  it("wraps words to the width, the first line after its lead, the others under it", () => {
    expect(wrap("    gate    ", "ask_denied denied by approver: production needs the release manager", 40)).toEqual([
      "    gate    ask_denied denied by",
      "            approver: production needs",
      "            the release manager",
    ]);
  });

  it("keeps each line of a multi-line text, and its indentation", () => {
    expect(wrap("  ", "Write it?\n\n  ## 1.4.0\n  - one", 80)).toEqual([
      "  Write it?",
      "",
      "    ## 1.4.0",
      "    - one",
    ]);
  });

  it("keeps the spaces between words, but for those at a break", () => {
    expect(wrap("", "allow  hook/context: a b", 80)).toEqual(["allow  hook/context: a b"]);
    expect(wrap("", "allow  hook/context", 10)).toEqual(["allow", "hook/conte", "xt"]);
  });

  it("cuts a word longer than a line across lines", () => {
    expect(wrap("> ", "x".repeat(25), 10)).toEqual(["> xxxxxxxx", "  xxxxxxxx", "  xxxxxxxx", "  x"]);
  });

  it("counts colour escapes as nothing, and never cuts one in two", () => {
    const style = makeStyle(true);
    const lines = wrap(style.dim("gate "), `${style.red("ask_denied")} ${style.bold("y".repeat(30))}`, 20);
    expect(lines.map(strip)).toEqual(["gate ask_denied", "     yyyyyyyyyyyyyyy", "     yyyyyyyyyyyyyyy"]);
    for (const line of lines) expect(line.replace(/\u001b\[[0-9;]*m/g, "")).not.toContain("\u001b");
    expect(visibleLength(style.green("approve"))).toBe(7);
  });

  it("never makes a line wider than the width, and loses no character", () => {
    const word = fc.stringMatching(/^[a-z…{}":,]{1,30}$/);
    const text = fc.array(
      fc.array(word, { maxLength: 12 }).map((words) => words.join(" ")),
      { minLength: 1, maxLength: 4 },
    );
    fc.assert(
      fc.property(text, fc.integer({ min: 20, max: 100 }), fc.boolean(), (paragraphs, width, color) => {
        const style = makeStyle(color);
        const lines = wrap(style.dim("  >> "), paragraphs.map((p) => style.yellow(p)).join("\n"), width);
        for (const line of lines) expect(visibleLength(line)).toBeLessThanOrEqual(width);
        const chars = (t: string): string => strip(t).replace(/[\s>]/g, "");
        expect(chars(lines.join("\n"))).toBe(chars(paragraphs.join("")));
      }),
    );
  });

  it("clips to a width with an ellipsis", () => {
    expect(clip("abcdef", 4)).toBe("abc…");
    expect(clip("abc", 4)).toBe("abc");
  });

  it("takes the terminal's width up to 80 columns", () => {
    expect(outputWidth({})).toBe(MAX_WIDTH);
    expect(outputWidth({ columns: 200 })).toBe(80);
    expect(outputWidth({ columns: 60 })).toBe(60);
    expect(outputWidth({ columns: 10 })).toBe(40);
  });
});
