import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, realpathSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import fc from "fast-check";
import { afterAll, describe, expect, it } from "vitest";
import {
  CanonicalJsonError,
  argsDigest,
  argsSha256,
  canonicalJson,
  descriptorDigest,
  descriptorFingerprint,
  digest16,
  GrantConfigError,
  projectIdentity,
} from "../src/grant/index.js";
import { referenceDigest16 } from "./support/fnv-reference.js";

const RUNS = Number(process.env["LOOPCTL_FUZZ_RUNS"] ?? 200);

const scratch = mkdtempSync(join(tmpdir(), "loopctl-digest-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

describe("digest16", () => {
  it("is FNV-1a 64 as 16 lowercase zero-padded hex digits", () => {
    expect(digest16("")).toBe("cbf29ce484222325");
    expect(digest16("a")).toBe("af63dc4c8601ec8c");
    expect(digest16("foobar")).toBe("85944171f73967e8");
    for (const text of ["", "a", "x".repeat(1000), "é€😀"]) {
      expect(digest16(text)).toMatch(/^[0-9a-f]{16}$/);
    }
  });

  it("hashes the UTF-8 bytes, equal to a BigInt reference for every string", () => {
    const anyUnit = fc.integer({ min: 0, max: 0xffff }).map((u) => String.fromCharCode(u));
    const text = fc.oneof(fc.string({ unit: "binary" }), fc.string({ unit: "grapheme" }), fc.string({ unit: anyUnit }));
    fc.assert(
      fc.property(text, (s) => {
        expect(digest16(s)).toBe(referenceDigest16(s));
      }),
      { numRuns: RUNS * 3 },
    );
  });

  it("hashes a lone surrogate as U+FFFD, as TextEncoder encodes it", () => {
    expect(digest16("a\uD800")).toBe(digest16("a\uFFFD"));
    expect(digest16("\uDC00b")).toBe(referenceDigest16("\uDC00b"));
    // canonicalJson escapes lone surrogates, so argsDigest tells them apart.
    expect(argsDigest("\uD800")).not.toBe(argsDigest("\uD801"));
    expect(argsDigest("\uD800")).toBe(digest16('"\\ud800"'));
  });
});

describe("argsSha256", () => {
  it("is sha256 over the same canonical text as argsDigest (golden value from an independent implementation)", () => {
    expect(argsSha256({ path: "/tmp/x", limit: 10 })).toBe(
      "aac27fab24fbcb86142764ee972e7358fec56d05721618604471f9916c47215b",
    );
    expect(argsSha256({ limit: 10, path: "/tmp/x" })).toBe(
      createHash("sha256").update('{"limit":10,"path":"/tmp/x"}').digest("hex"),
    );
    expect(() => argsSha256({ n: Number.NaN })).toThrow(CanonicalJsonError);
  });
});

describe("descriptor pins cover what the human saw", () => {
  const read = {
    name: "read_file",
    description: "Read a UTF-8 text file",
    inputSchema: { type: "object", properties: { path: { type: "string" } }, required: ["path"] },
  };

  it("a descriptor without title, annotations or outputSchema keeps the pin it always had (golden, so old ledgers keep working)", () => {
    expect(descriptorFingerprint(read)).toBe("sha256:d27fe012b6dd25f6ad3596914c217e58ed775271f939f324ff458ce32f1af761");
    expect(descriptorDigest(read)).toBe("1b3319a3cb6d97a9");
    expect(descriptorFingerprint({ ...read, title: undefined, annotations: undefined } as never)).toBe(
      descriptorFingerprint(read),
    );
  });

  it.each([
    ["title", { title: "Read file" }],
    ["annotations", { annotations: { readOnlyHint: true } }],
    ["outputSchema", { outputSchema: { type: "object" } }],
  ])("a change of %s alone changes the fingerprint", (_part, extra) => {
    const withPart = { ...read, ...extra };
    expect(descriptorFingerprint(withPart)).not.toBe(descriptorFingerprint(read));
    expect(descriptorFingerprint(withPart)).toBe(descriptorFingerprint(structuredClone(withPart)));
  });

  it("an annotations-only change (destructiveHint flipped) is a new fingerprint", () => {
    const safe = { ...read, annotations: { readOnlyHint: true, destructiveHint: false } };
    const changed = { ...read, annotations: { readOnlyHint: true, destructiveHint: true } };
    expect(descriptorFingerprint(changed)).not.toBe(descriptorFingerprint(safe));
  });
});

describe("argsDigest", () => {
  it("matches the spec's golden value and not the un-canonical text's", () => {
    expect(argsDigest({ path: "/tmp/x", limit: 10 })).toBe("f1ed61cd8ca5e26b");
    expect(digest16(JSON.stringify({ path: "/tmp/x", limit: 10 }))).toBe("8b6cb9110c0422ab");
    expect(argsDigest({ limit: 10, path: "/tmp/x" })).toBe("f1ed61cd8ca5e26b");
  });

  it("never depends on key order", () => {
    fc.assert(
      fc.property(fc.dictionary(fc.string({ unit: "binary" }), fc.jsonValue({ maxDepth: 2 })), (dict) => {
        const reversed = Object.fromEntries(Object.entries(dict).reverse());
        expect(argsDigest(reversed)).toBe(argsDigest(dict));
      }),
      { numRuns: RUNS },
    );
  });

  it("refuses arguments JSON cannot carry", () => {
    expect(() => argsDigest({ n: Number.NaN })).toThrow(CanonicalJsonError);
  });
});

describe("descriptor digests", () => {
  const tool = {
    name: "read",
    description: "Read a file",
    inputSchema: { type: "object", properties: { path: { type: "string" } } },
  };
  const text = canonicalJson({
    name: tool.name,
    description: tool.description,
    schema: { tool: tool.name, description: tool.description, input_schema: tool.inputSchema },
  });

  it("hashes the original's descriptor shape", () => {
    expect(text).toBe(
      '{"description":"Read a file","name":"read","schema":{"description":"Read a file",' +
        '"input_schema":{"properties":{"path":{"type":"string"}},"type":"object"},"tool":"read"}}',
    );
    expect(descriptorDigest(tool)).toBe(digest16(text));
    expect(descriptorDigest(tool)).toBe(referenceDigest16(text));
  });

  it("fingerprints the same text with sha256", () => {
    const hex = createHash("sha256").update(text, "utf8").digest("hex");
    expect(descriptorFingerprint(tool)).toBe(`sha256:${hex}`);
    expect(descriptorFingerprint(tool)).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  /** Each digest of a descriptor by its function's name, and what it threw for `value`. */
  const refusalsOf = (value: unknown): [string, unknown][] =>
    (
      [
        ["descriptorDigest", descriptorDigest],
        ["descriptorFingerprint", descriptorFingerprint],
      ] as const
    ).map(([where, digest]) => {
      try {
        digest(value as never);
      } catch (error) {
        return [where, error];
      }
      return [where, undefined];
    });

  it.each([null, undefined, "read", 5])("refuses a descriptor that is %s with GrantConfigError naming it", (bad) => {
    for (const [where, error] of refusalsOf(bad)) {
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument: "descriptor" });
      expect((error as Error).message).toMatch(new RegExp(`^${where}: descriptor must be an object, got `));
    }
  });

  it("refuses a Tool in place of its descriptor, rather than pin the name alone", () => {
    // A Tool from defineTool has a name but no description or inputSchema of its own: hashed
    // as a descriptor it would give one pin for every version of the tool, so a tool changed
    // behind a grant would still match it.
    const asTool = { name: "read", descriptor: tool, check: () => ({ type: "valid" }), execute: () => "" };
    for (const [where, error] of refusalsOf(asTool)) {
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument: "descriptor" });
      expect((error as Error).message).toBe(
        `${where}: descriptor has neither a description nor an inputSchema, so only its name would be pinned (for a Tool, pass tool.descriptor)`,
      );
    }
  });

  it("pins a descriptor that has a description or an inputSchema, even without the other", () => {
    expect(descriptorFingerprint({ name: "read", inputSchema: { type: "object" } } as never)).toMatch(/^sha256:/);
    expect(descriptorFingerprint({ name: "read", description: "Read" } as never)).toMatch(/^sha256:/);
  });

  it("changes when any part of the descriptor changes", () => {
    const changed = [
      { ...tool, name: "Read" },
      { ...tool, description: "Read a file." },
      { ...tool, inputSchema: { type: "object" } },
    ];
    for (const other of changed) {
      expect(descriptorDigest(other)).not.toBe(descriptorDigest(tool));
      expect(descriptorFingerprint(other)).not.toBe(descriptorFingerprint(tool));
    }
    expect(
      descriptorDigest({ ...tool, inputSchema: { properties: tool.inputSchema.properties, type: "object" } }),
    ).toBe(descriptorDigest(tool));
  });
});

describe("projectIdentity", () => {
  it("uses the realpath of an existing folder", () => {
    const real = join(scratch, "real");
    mkdirSync(real);
    const link = join(scratch, "link");
    symlinkSync(real, link);
    expect(projectIdentity(real)).toBe(digest16(realpathSync(real)));
    expect(projectIdentity(link)).toBe(projectIdentity(real));
    expect(projectIdentity(`${real}/`)).toBe(projectIdentity(real));
  });

  it("keeps the identity of a project bound before its folder existed", () => {
    const later = join(scratch, "link", "later");
    const before = projectIdentity(later);
    expect(before).toBe(digest16(join(realpathSync(join(scratch, "real")), "later")));
    mkdirSync(later);
    expect(projectIdentity(later)).toBe(before);
  });

  it("falls back to the absolute path when the parent is missing too", () => {
    const missing = join(scratch, "no", "such", "dir");
    expect(projectIdentity(missing)).toBe(digest16(missing));
  });

  it("refuses a folder that is not a non-empty string (an unset variable) instead of one identity for all of them", () => {
    for (const dir of [undefined, null, "", 5, {}, Symbol("dir")]) {
      let error: unknown;
      try {
        projectIdentity(dir as string);
      } catch (thrown) {
        error = thrown;
      }
      expect(error).toBeInstanceOf(GrantConfigError);
      expect(error).toMatchObject({ code: "GRANT_CONFIG", argument: "dir" });
      expect((error as Error).message).toContain("projectIdentity: dir must be a non-empty string");
    }
  });

  it("refuses a folder holding a NUL character, which no path can hold", () => {
    expect(() => projectIdentity(join(scratch, "a\0b"))).toThrow(
      expect.objectContaining({ code: "GRANT_CONFIG", argument: "dir" }) as Error,
    );
  });
});
