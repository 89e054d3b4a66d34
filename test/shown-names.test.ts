import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { z } from "zod";
import { AiSdkToolError } from "../src/ai-sdk/index.js";
import { AskCallbackError, InvalidAskResolutionError } from "../src/ask/index.js";
import { Agent, defineTool, LoopManagers } from "../src/engine/index.js";
import type { RunResult } from "../src/engine/index.js";
import { shownValue } from "../src/errors.js";
import { Grant, GrantPolicy, GrantRecordError, GrantScope, MemoryGrantStore } from "../src/grant/index.js";
import { McpToolError } from "../src/mcp/index.js";
import { AgentsApprovalError } from "../src/openai-agents/index.js";
import { shownText } from "../src/shown.js";
import { ScriptedModel } from "../src/testing/index.js";
import { shownBare, shownKey } from "../src/unknown-option.js";
import { cli } from "./support/cli-harness.js";
import { seed, useTempProject } from "./support/cli-grants-fixtures.js";

/**
 * Names that JSON's escapes leave as they are, each reading as another name: a right-to-left
 * override (`rm\u202Eexe.txt` reads "rmtxt.exe"), a zero-width space (`dep\u200Bloy` reads
 * "deploy"), a line separator (a line break to many readers) and a C1 control (NEL).
 */
const HOSTILE: readonly [string, string][] = [
  ["rm\u202Eexe.txt", String.raw`"rm\u202eexe.txt"`],
  ["dep\u200Bloy", String.raw`"dep\u200bloy"`],
  ["a\u2028b", String.raw`"a\u2028b"`],
  ["x\u0085y", String.raw`"x\u0085y"`],
];

describe("shownText", () => {
  it("escapes what JSON leaves raw and would not show as itself, and still parses to the text", () => {
    for (const [name, shown] of HOSTILE) {
      expect(shownText(name)).toBe(shown);
      expect(JSON.parse(shownText(name))).toBe(name);
    }
    const every = [
      "\u061C", // Arabic letter mark
      "\u200E\u200F", // LTR, RTL marks
      "\u202A\u202B\u202C\u202D\u202E", // embeddings, pop, overrides
      "\u2066\u2067\u2068\u2069", // isolates
      "\u200B\u200C\u200D\u2060\uFEFF", // zero-width space, non-joiner, joiner, word joiner, BOM
      "\u2028\u2029", // line and paragraph separators
      "\u0080\u009F\u007F", // C1 controls, DEL
      "\u00A0\u2003\u3000", // no-break, em and ideographic spaces
      "\u00AD\u3164\uFE0F", // soft hyphen, Hangul filler, variation selector
      "\uE000\u{F0000}", // private use
      "\u{E0041}", // a tag character
      "\uD800", // a lone surrogate
    ].join("");
    const shown = shownText(every);
    expect(shown).toMatch(/^"(\\u[0-9a-f]{4})+"$/);
    expect(JSON.parse(shown)).toBe(every);
    expect(shown).toContain(String.raw`\udb40\udc41`);
  });

  it("leaves the plain space, letters of any script, and JSON's own escapes as JSON writes them", () => {
    expect(shownText("read file")).toBe('"read file"');
    expect(shownText("café 読む Ωμέγα")).toBe('"café 読む Ωμέγα"');
    expect(shownText('a"b\\c\n\u001b')).toBe(JSON.stringify('a"b\\c\n\u001b'));
  });
});

describe("shownKey, shownBare and shownValue", () => {
  it("quote a name in single quotes unless it holds a character that would not show, a quote or a backslash", () => {
    expect(shownKey("read_file")).toBe("'read_file'");
    expect(shownKey('say "hi"')).toBe(`'say "hi"'`);
    expect(shownKey("café")).toBe("'café'");
    expect(shownKey("it's")).toBe(`"it's"`);
    // A name spelling an escape is not taken for the name that holds the character.
    expect(shownKey(String.raw`rm\u202eexe.txt`)).toBe(String.raw`"rm\\u202eexe.txt"`);
    for (const [name, shown] of HOSTILE) expect(shownKey(name)).toBe(shown);
  });

  it("show a bare name bare, and one holding such a character or a backslash quoted and escaped", () => {
    expect(shownBare("read")).toBe("read");
    expect(shownBare("café")).toBe("café");
    expect(shownBare(String.raw`rm\u202e`)).toBe(String.raw`"rm\\u202e"`);
    expect(shownBare("a\u00A0b")).toBe(String.raw`"a\u00a0b"`);
    for (const [name, shown] of HOSTILE) {
      expect(shownBare(name)).toBe(shown);
      expect(shownValue(name)).toBe(shown);
    }
  });
});

describe("every surface that shows a name shows one that reads as another escaped", () => {
  it("the grant layer's errors and policy.explain", async () => {
    for (const [name, shown] of HOSTILE) {
      expect(() => new Grant(name, "maybe" as never, GrantScope.thisTool())).toThrow(
        new GrantRecordError(`grant for tool ${shown}: verdict must be "allow" or "deny", got "maybe"`),
      );
      const policy = new GrantPolicy(new MemoryGrantStore([new Grant(name, "allow", GrantScope.thisTool())]));
      const explained = await policy.explain(name, {});
      expect(explained.lines[0]).toMatch(
        new RegExp(`^tool ${escapeRe(shown)} with args [0-9a-f]{16}: 1 covering grant$`),
      );
    }
    expect((await new GrantPolicy(new MemoryGrantStore()).explain("café", {})).lines[0]).toMatch(
      /^tool 'café' with args [0-9a-f]{16}: 0 covering grants$/,
    );
  });

  it("the ask layer's errors", () => {
    for (const [name, shown] of HOSTILE) {
      expect(new InvalidAskResolutionError(name, "no").message).toBe(`invalid resolution for ask ${shown}: no`);
      expect(new AskCallbackError("a1", name).message).toBe(`ask resolver callback threw for ask a1 (tool ${shown})`);
    }
  });

  it("what the model reads and the record's reason", async () => {
    const calls = [...HOSTILE.map(([name]) => name), "café"].map((name, i) => ({ id: `c${i}`, name, input: {} }));
    const model = new ScriptedModel([{ toolCalls: calls }, { text: "done" }]);
    const read = defineTool({ name: "read", description: "reads", input: z.object({}), execute: () => "x" });
    const result = await new Agent({ model, tools: [read], managers: new LoopManagers() }).run("go");
    const shown = [...HOSTILE.map(([, s]) => s), "'café'"];
    expect(results(result)).toEqual(shown.map((s) => `Unknown tool ${s}`));
    expect(result.records.map((r) => r.reason)).toEqual(shown.map((s) => `unknown tool ${s}`));
  });

  it("the MCP, AI SDK and OpenAI Agents errors", () => {
    for (const [name, shown] of HOSTILE) {
      expect(new McpToolError("files", name, "down").message).toBe(`tool ${shown} on MCP server 'files': down`);
      expect(new McpToolError(name, "read", "down").message).toBe(`tool 'read' on MCP server ${shown}: down`);
      expect(new AiSdkToolError(name, "no").message).toBe(`tool ${shown}: no`);
      expect(new AgentsApprovalError(name, "no").message).toBe(`tool ${shown}: no`);
    }
    expect(new McpToolError("files", "café", "down").message).toBe(`tool 'café' on MCP server 'files': down`);
  });

  describe("the CLI", () => {
    let root = "";
    let project = "";
    let base = "";
    useTempProject((made) => ({ root, project, base } = made));

    it("revoke names a tool holding such a character quoted, apart from one that spells its escape", async () => {
      const real = new Grant("rm\u202Eexe.txt", "allow", GrantScope.thisTool());
      const spelt = new Grant(String.raw`rm\u202eexe.txt`, "allow", GrantScope.thisTool());
      await seed(root, project, [real, spelt]);
      const at = ["--root", root, "--project", project];
      const first = await cli(["grants", "revoke", real.id, ...at], { cwd: base });
      const second = await cli(["grants", "revoke", spelt.id, ...at], { cwd: base });
      expect(first.stdout).toContain(String.raw`revoked ${real.id} (allow "rm\u202eexe.txt", this_tool)`);
      expect(second.stdout).toContain(String.raw`revoked ${spelt.id} (allow "rm\\u202eexe.txt", this_tool)`);
    });

    it("reset, explain and list escape the name, a no-break space included", async () => {
      const names = [...HOSTILE.map(([name]) => name), "a\u00A0b"];
      await seed(
        root,
        project,
        names.map((name) => new Grant(name, "deny", GrantScope.thisTool())),
      );
      const at = ["--root", root, "--project", project];
      const list = await cli(["grants", "list", ...at], { cwd: base });
      expect(list.stdout).toContain(String.raw`a\u00a0b`);
      const explain = await cli(["grants", "explain", "--tool", "x\u0085y", "--args", "{}", ...at], { cwd: base });
      expect(explain.stdout).toContain(String.raw`tool "x\u0085y" with args`);
      for (const name of names) {
        const reset = await cli(["grants", "reset", "--tool", name, ...at], { cwd: base });
        expect(reset.stdout).toContain(` of tool ${shownText(name)} from `);
      }
      for (const run of [list, explain]) {
        expect(run.stdout).not.toMatch(/[\u00A0\u0085\u200B\u2028\u202E]/);
      }
    });
  });
});

describe("the approval console's script", () => {
  const js = readFileSync(new URL("../src/server/console/console.js", import.meta.url), "utf8");
  const hidden = new RegExp(/const HIDDEN = \/(.+)\/u;/.exec(js)?.[1] ?? "no HIDDEN", "u");

  it("marks every bidi control, zero-width character, separator and C1 control", () => {
    for (const char of "\u061C\u200E\u200F\u202A\u202B\u202C\u202D\u202E\u2066\u2067\u2068\u2069\u200B\u200C\u200D\u2060\uFEFF\u2028\u2029\u0085\u009F") {
      expect(hidden.test(char), `U+${char.codePointAt(0)?.toString(16)}`).toBe(true);
    }
  });

  it("sets no text of an ask, a grant or a record without marking what would not show", () => {
    expect(js).not.toMatch(/textContent = (ask|grant|record)\./);
  });
});

function results(result: RunResult): string[] {
  return result.messages.flatMap((m) => (m.type === "tool_result" ? [m.content] : []));
}

function escapeRe(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}
