import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { AskResolutionSchema, PendingAskSchema } from "loopctl/ask";
import { GATE_VERDICTS, GateDecisionSchema, RULE_SOURCES } from "loopctl/engine";
import { GrantRecordSchema, argsDigest, argsSha256, digest16 } from "loopctl/grant";
import { codeBlocks } from "./support/doc-snippets.js";

const page = "docs/wire-format.md";
const json = codeBlocks(page, "json");

const text = readFileSync(new URL(`../${page}`, import.meta.url), "utf8");

/** The rows of the field table that follows `heading` on the page. */
function tableRows(heading: string): string[] {
  const section = text.slice(text.indexOf(heading));
  const table = section.slice(section.indexOf("| field |"));
  return table.slice(0, table.indexOf("\n\n")).split("\n").slice(2);
}

/** The fields a table lists, in its order. */
const tableFields = (heading: string): string[] =>
  tableRows(heading).map((row) => /^\| `([^`]+)` \|/.exec(row)?.[1] ?? row);

/** The code spans of the type column of `field`'s row under `heading`. */
const typeColumn = (heading: string, field: string): string[] => {
  const row = tableRows(heading).find((r) => r.startsWith(`| \`${field}\` |`)) ?? "";
  return [...(row.split(" | ")[1] ?? "").matchAll(/`([^`]+)`/g)].map((m) => m[1] as string);
};

describe("docs/wire-format.md: its examples are what the schemas read", () => {
  it("has the examples this test reads", () => {
    expect(json).toHaveLength(4);
    expect(codeBlocks(page, "ts")).toHaveLength(1);
  });

  it("the PendingAsk parses whole, and its table lists exactly its fields", () => {
    const ask: unknown = JSON.parse(json[0] as string);
    expect(PendingAskSchema.parse(ask)).toEqual(ask);
    expect(tableFields("## PendingAsk")).toEqual(Object.keys(ask as object));
  });

  it("each AskResolution parses whole", () => {
    const answers = (json[1] as string).trim().split("\n");
    expect(answers).toHaveLength(4);
    for (const line of answers) {
      const answer: unknown = JSON.parse(line);
      expect(AskResolutionSchema.parse(answer)).toEqual(answer);
    }
  });

  it("the GateDecision parses whole, and its table lists its fields, verdicts and rule sources", () => {
    const record: unknown = JSON.parse(json[2] as string);
    expect(GateDecisionSchema.parse(record)).toEqual(record);
    expect(tableFields("## GateDecision")).toEqual(Object.keys(record as object));
    expect(typeColumn("## GateDecision", "verdict")).toEqual([...GATE_VERDICTS]);
    expect(typeColumn("## GateDecision", "ruleSource")).toEqual([...RULE_SOURCES]);
  });

  it("the ledger record parses as one, and is the first of the demo's ledger grants.md shows", () => {
    const records = JSON.parse(json[3] as string) as unknown[];
    expect(records).toHaveLength(1);
    expect(() => GrantRecordSchema.parse(records[0])).not.toThrow();
    const demo = JSON.parse(codeBlocks("docs/grants.md", "json")[0] as string) as unknown[];
    expect(records[0]).toEqual(demo[0]);
  });

  it("the digests it gives to check an implementation against are the ones computed", () => {
    const functions: Record<string, (value: never) => string> = { argsDigest, argsSha256, digest16 };
    const lines = (codeBlocks(page, "ts")[0] as string).split("\n").filter((line) => line.includes("// "));
    expect(lines).toHaveLength(3);
    for (const line of lines) {
      const match = /^(\w+)\((.*)\); +\/\/ "([0-9a-f]+)"/.exec(line);
      expect(match, line).not.toBeNull();
      const [, name, argument, shown] = match as unknown as [string, string, string, string];
      // The argument is an object literal, or JSON.stringify of one: plain JSON once its keys are quoted.
      const literal = argument.replace(/^JSON\.stringify\((.*)\)$/, "$1");
      const value: unknown = JSON.parse(literal.replace(/(\w+):/g, '"$1":'));
      const input = literal === argument ? value : JSON.stringify(value);
      expect((functions[name] as (value: unknown) => string)(input), line).toBe(shown);
    }
  });
});
