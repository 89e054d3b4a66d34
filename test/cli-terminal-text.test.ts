import { writeFile } from "node:fs/promises";
import { join } from "node:path";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AuditSink } from "../src/audit/index.js";
import { EXIT } from "../src/cli/index.js";
import { table } from "../src/cli/format.js";
import { FileGrantStore, Grant, GrantScope } from "../src/grant/index.js";
import type { GrantRecord } from "../src/grant/index.js";
import { gateRecord } from "./support/cli-audit-fixtures.js";
import { cli } from "./support/cli-harness.js";
import type { CliRun } from "./support/cli-harness.js";
import { seed, useTempProject } from "./support/cli-grants-fixtures.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

let base: string;
let root: string;
let project: string;

useTempProject((made) => ({ base, root, project } = made));

const at = (): string[] => ["--root", root, "--project", project];

/**
 * What must never reach a terminal raw: controls, format characters (zero
 * widths, joiners, bidi controls, the soft hyphen, the byte-order mark, tags),
 * every other default-ignorable code point, line and paragraph separators, and
 * lone surrogates. Newlines are the CLI's own, between lines.
 */
const UNSAFE = /(?!\n)[\p{Cc}\p{Cf}\p{Default_Ignorable_Code_Point}\p{Zl}\p{Zp}]|\p{Cs}/u;

function expectTerminalSafe(run: CliRun, what: string): void {
  expect(run.stdout, `${what}: stdout`).not.toMatch(UNSAFE);
  expect(run.stderr, `${what}: stderr`).not.toMatch(UNSAFE);
}

const INVISIBLE: readonly [string, string][] = [
  ["\u200b", "\\u200b"], // zero width space
  ["\u2060", "\\u2060"], // word joiner
  ["\ufeff", "\\ufeff"], // byte-order mark
  ["\u00ad", "\\u00ad"], // soft hyphen
  ["\u061c", "\\u061c"], // Arabic letter mark (a bidi control)
  ["\u202e", "\\u202e"], // right-to-left override
  ["\u{e0064}", "\\u{e0064}"], // tag letter d
  ["\ufe0f", "\\ufe0f"], // variation selector 16
  ["\u3164", "\\u3164"], // Hangul filler
  ["\u0085", "\\u0085"], // next line (C1)
];

describe("what the CLI prints about a name", () => {
  it("never prints a name with an invisible character as the plain name", async () => {
    const grants = INVISIBLE.map(([c]) => new Grant(`dep${c}loy`, "deny", GrantScope.thisTool()));
    await seed(root, project, [new Grant("deploy", "allow", GrantScope.thisTool()), ...grants]);
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expectTerminalSafe(run, "grants list");
    for (const [, shown] of INVISIBLE) expect(run.stdout).toContain(`dep${shown}loy`);
    // Only the real "deploy" prints as "deploy".
    expect(run.stdout.match(/\bdeploy\b/g)).toHaveLength(1);
  });

  it("keeps --json valid JSON, escaping what it must as \\uXXXX, and the names exact", async () => {
    const names = INVISIBLE.map(([c]) => `dep${c}loy`);
    await seed(
      root,
      project,
      names.map((name) => new Grant(name, "deny", GrantScope.thisCall({ note: name }))),
    );
    const run = await cli(["grants", "list", "--json", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expectTerminalSafe(run, "grants list --json");
    expect(run.stdout).toContain("dep\\u202eloy");
    expect(run.stdout).toContain("dep\\udb40\\udc64loy");
    const parsed = JSON.parse(run.stdout) as { grants: GrantRecord[] };
    expect(parsed.grants.map((g) => g.tool).sort()).toEqual([...names].sort());
    expect(
      parsed.grants.map((g) => (g.scope as { this_call: { args: { note: string } } }).this_call.args.note).sort(),
    ).toEqual([...names].sort());
  });

  it("escapes any name, in every grants command, text and JSON", async () => {
    const store = new FileGrantStore(root, project);
    await fc.assert(
      fc.asyncProperty(
        fc.string({ unit: "binary", minLength: 1, maxLength: 12 }),
        fc.string({ unit: "binary", maxLength: 8 }),
        async (tool, note) => {
          const grant = new Grant(tool, "allow", GrantScope.thisCall({ [note]: tool })).withNote(note);
          await store.clear();
          await store.save(grant);
          const runs: [string, CliRun][] = [];
          for (const argv of [
            ["grants", "list"],
            ["grants", "list", "--json"],
            ["grants", "explain", "--tool", tool, "--args", JSON.stringify({ [note]: tool })],
            ["grants", "explain", "--json", "--tool", tool, "--args", JSON.stringify({ [note]: tool })],
            ["grants", "reset", "--tool", `${tool}x`],
            ["grants", "revoke", grant.id],
          ]) {
            runs.push([argv.join(" "), await cli([...argv, ...at()], { cwd: base })]);
          }
          for (const [what, run] of runs) {
            expect(run.code, what).toBe(EXIT.ok);
            expectTerminalSafe(run, what);
          }
          const listed = JSON.parse((runs[1] as [string, CliRun])[1].stdout) as { grants: GrantRecord[] };
          expect(listed.grants).toEqual([grant.toJSON()]);
          const explained = JSON.parse((runs[3] as [string, CliRun])[1].stdout) as { tool: string };
          expect(explained.tool).toBe(tool);
        },
      ),
      { numRuns: Math.min(RUNS, 60) },
    );
  });

  it("never prints a name with a letter that passes for a Latin one as the Latin name it copies", async () => {
    // Cyrillic а, Greek ο, Armenian օ, Cherokee Ꭺ, Coptic ⲟ and Lisu ꓮ, each in a word that also
    // holds Latin letters; a word all of one script keeps its letters.
    const alike = "re\u0430d_file";
    const others = ["g\u03bfogle", "g\u0585", "\u13aaB", "l\u2c9fl", "\ua4eepple"];
    const grant = new Grant(alike, "deny", GrantScope.thisCall({ url: "p\u0430ypal.com" })).withNote("Привет, мир");
    await seed(root, project, [
      new Grant("read_file", "allow", GrantScope.thisTool()),
      grant,
      ...others.map((name) => new Grant(name, "allow", GrantScope.thisTool())),
      new Grant("файл_чтения", "allow", GrantScope.thisTool()),
    ]);
    const list = await cli(["grants", "list", ...at()], { cwd: base });
    expect(list.code).toBe(EXIT.ok);
    expect(list.stdout).toContain("re\\u0430d_file");
    expect(list.stdout).toContain('{"url":"p\\u0430ypal.com"}');
    for (const shown of ["g\\u03bfogle", "g\\u0585", "\\u13aaB", "l\\u2c9fl", "\\ua4eepple"]) {
      expect(list.stdout).toContain(shown);
    }
    for (const name of [alike, "p\u0430ypal", ...others]) expect(list.stdout).not.toContain(name);
    expect(list.stdout).toContain("файл_чтения");
    expect(list.stdout).toContain("Привет, мир");
    expect(list.stdout.match(/\bread_file\b/g)).toHaveLength(1);

    const explain = await cli(["grants", "explain", "--tool", alike, "--args", '{"url":"p\u0430ypal.com"}', ...at()], {
      cwd: base,
    });
    expect(explain.code).toBe(EXIT.ok);
    expect(explain.stdout).toContain("re\\u0430d_file");
    expect(explain.stdout).not.toContain(alike);
    // --json stays exact: a program reads it, not a person.
    const asJson = await cli(["grants", "explain", "--json", "--tool", alike, "--args", "{}", ...at()], { cwd: base });
    expect((JSON.parse(asJson.stdout) as { tool: string }).tool).toBe(alike);

    const reset = await cli(["grants", "reset", "--tool", "re\u0430d_fil", ...at()], { cwd: base });
    expect(reset.code).toBe(EXIT.ok);
    expect(reset.stdout + reset.stderr).toContain("re\\u0430d_fil");
    expect(reset.stdout + reset.stderr).not.toMatch(/\u0430/u);

    const revoke = await cli(["grants", "revoke", grant.id, ...at()], { cwd: base });
    expect(revoke.code).toBe(EXIT.ok);
    expect(revoke.stdout).toContain(`revoked ${grant.id} (deny re\\u0430d_file, this_call {"url":"p\\u0430ypal.com"})`);
  });

  it("escapes what it echoes back in errors", async () => {
    const run = await cli(["grants", "revoke", "dep\u200bloy\u202e", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.usage);
    expectTerminalSafe(run, "usage error");
    expect(run.stderr).toContain("dep\\u200bloy\\u202e");
    const unknown = await cli(["grants", "li\u2060st"], { cwd: base });
    expect(unknown.code).toBe(EXIT.usage);
    expectTerminalSafe(unknown, "unknown command");
  });

  it("escapes a log's file name in audit verify, text and JSON", async () => {
    const name = "gates\u202elnosj.jsonl";
    const sink = await AuditSink.open(join(base, name));
    await sink.append(gateRecord(1, { tool: "dep\u200bloy" }));
    await sink.close();
    const text = await cli(["audit", "verify", name], { cwd: base });
    expect(text.code).toBe(EXIT.ok);
    expectTerminalSafe(text, "audit verify");
    expect(text.stdout).toContain("gates\\u202elnosj.jsonl");
    const asJson = await cli(["audit", "verify", name, "--json"], { cwd: base });
    expectTerminalSafe(asJson, "audit verify --json");
    expect((JSON.parse(asJson.stdout) as { file: string }).file).toBe(join(base, name));
    await writeFile(join(base, name), "{}\n");
    const failed = await cli(["audit", "verify", name, "--json"], { cwd: base });
    expect(failed.code).toBe(EXIT.failed);
    expectTerminalSafe(failed, "audit verify --json, failed");
    const missing = await cli(["audit", "verify", `no\u2066pe.jsonl`], { cwd: base });
    expect(missing.code).toBe(EXIT.failed);
    expectTerminalSafe(missing, "audit verify, missing");
  });
});

/**
 * Display columns of the sample text below, counted here apart from the CLI:
 * CJK, Hangul, fullwidth forms and emoji take two, combining marks none.
 */
const columns = (text: string): number => {
  let n = 0;
  for (const c of text) {
    if (/\p{M}/u.test(c)) continue;
    const wide =
      /[\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\uff01-\uff60\uffe0-\uffe6\u{1f300}-\u{1f64f}\u{1f680}-\u{1f6ff}\u{1f900}-\u{1f9ff}\u{20000}-\u{3fffd}]/u;
    n += wide.test(c) ? 2 : 1;
  }
  return n;
};

describe("the CLI's tables with wide characters", () => {
  it("pads cells by display width: wide characters take two columns, combining marks none", () => {
    const rows = [
      ["漢字", "a"], // CJK ideographs: 2 each
      ["ab", "b"],
      ["cafe\u0301", "c"], // e + combining acute: 1
      ["🚀", "d"], // emoji: 2
      ["Ａｂ", "e"], // fullwidth forms: 2 each
      ["ｶﾅ", "f"], // halfwidth katakana: 1 each
      ["한", "g"], // a Hangul syllable: 2
      ["\u{20000}", "h"], // CJK Extension B, beyond the BMP: 2
      ["👍🏽", "i"], // an emoji with its skin tone: drawn as one, 2
    ];
    expect(table(["TOOL", "NOTE"], rows).split("\n")).toEqual([
      "TOOL  NOTE",
      "漢字  a",
      "ab    b",
      "cafe\u0301  c",
      "🚀    d",
      "Ａｂ  e",
      "ｶﾅ    f",
      "한    g",
      "\u{20000}    h",
      "👍🏽    i",
      "",
    ]);
  });

  it("counts an escaped invisible character as the escape it is printed as", () => {
    expect(
      table(
        ["A", "B"],
        [
          ["x\u200by", "1"],
          ["abcdefghi", "2"],
        ],
      ).split("\n"),
    ).toEqual(["A          B", "x\\u200by   1", "abcdefghi  2", ""]);
  });

  it("lines up every column of grants list whatever the names, scopes and notes hold", async () => {
    const tools = ["翻訳", "ｶﾀｶﾅ", "Ｆｕｌｌ", "🚀launch", "cafe\u0301", "한국어", "read", "d\u200beploy"];
    await seed(
      root,
      project,
      tools.map((tool, i) =>
        new Grant(
          tool,
          i % 2 === 0 ? "allow" : "deny",
          i % 3 === 0 ? GrantScope.thisTool() : GrantScope.thisCall({ path: `文書/報告${i}.txt` }),
        ).withNote(`理由 ${tool}`),
      ),
    );
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    const [, ...lines] = run.stdout.trimEnd().split("\n");
    const rows = lines.slice(0, -1);
    expect(rows).toHaveLength(tools.length + 1);
    // Where each column starts, in display columns: every cell is a run without two spaces in a row.
    const starts = rows.map((line) => {
      const found: number[] = [];
      for (const match of line.matchAll(/(?:^|(?<= {2}))\S/g)) found.push(columns(line.slice(0, match.index)));
      return found;
    });
    expect(starts[0]).toHaveLength(7);
    for (const [i, row] of starts.entries()) expect(row, rows[i]).toEqual(starts[0]);
  });

  it("clips a long scope to its width without cutting a character in two", async () => {
    await seed(root, project, [new Grant("read", "allow", GrantScope.thisCall({ p: "😀".repeat(40) }))]);
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expectTerminalSafe(run, "grants list");
    const row = run.stdout.split("\n")[2] as string;
    const scope = /this_call \S+/.exec(row)?.[0] as string;
    expect(scope).toMatch(/^this_call \{"p":"(😀)+…$/u);
    expect(columns(scope)).toBeLessThanOrEqual("this_call ".length + 48);
    expect(columns(scope)).toBeGreaterThanOrEqual("this_call ".length + 47);
  });

  it("clips a scope of invisible characters by the escapes it is printed as", async () => {
    // Each zero width space is printed as \u200b: six columns, not none.
    await seed(root, project, [new Grant("read", "allow", GrantScope.thisCall({ p: "\u200b".repeat(5_000) }))]);
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expectTerminalSafe(run, "grants list");
    const row = run.stdout.split("\n")[2] as string;
    const scope = /this_call \S+/.exec(row)?.[0] as string;
    expect(scope).toMatch(/^this_call \{"p":"(\\u200b)+…$/u);
    expect(scope.length).toBeLessThanOrEqual("this_call ".length + 48);
    expect(scope.length).toBeGreaterThanOrEqual("this_call ".length + 48 - 6);
  });

  it("clips a scope by the escapes its look-alike letters are printed as", async () => {
    // Each Cyrillic а, in one word with Latin x, is printed as \u0430: six columns, not one.
    await seed(root, project, [new Grant("read", "allow", GrantScope.thisCall({ p: "x\u0430".repeat(5_000) }))]);
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    const row = run.stdout.split("\n")[2] as string;
    const scope = /this_call \S+/.exec(row)?.[0] as string;
    expect(scope).toMatch(/^this_call \{"p":"(x\\u0430)+x?…$/u);
    expect(scope.length).toBeLessThanOrEqual("this_call ".length + 48);
    expect(scope.length).toBeGreaterThanOrEqual("this_call ".length + 48 - 6);
  });
});

describe("the CLI's tables", () => {
  it("lays out a table of 200,000 rows (grants list of a large ledger) without overflowing the stack", () => {
    const rows = Array.from({ length: 200_000 }, (_, i) => [`tool_${i}`, "allow", i === 7 ? "the longest note" : "-"]);
    const text = table(["TOOL", "ACTION", "NOTE"], rows);
    const lines = text.split("\n");
    expect(lines).toHaveLength(200_002);
    expect(lines[0]).toBe("TOOL         ACTION  NOTE");
    expect(lines[8]).toBe("tool_7       allow   the longest note");
    expect(lines[200_000]).toBe("tool_199999  allow   -");
  });
});
