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
