import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { dirname } from "node:path";
import { describe, expect, it } from "vitest";
import { EXIT } from "../src/cli/index.js";
import { FileGrantStore, Grant, GrantScope, argsDigest, descriptorFingerprint } from "../src/grant/index.js";
import type { ToolDescriptor } from "../src/grant/index.js";
import { cli } from "./support/cli-harness.js";
import { seed, useTempProject } from "./support/cli-grants-fixtures.js";

let base: string;
let root: string;
let project: string;

useTempProject((made) => ({ base, root, project } = made));

const at = (): string[] => ["--root", root, "--project", project];
const write: ToolDescriptor = { name: "write", description: "writes a file", inputSchema: { type: "object" } };
const writeJson = JSON.stringify({ description: write.description, inputSchema: write.inputSchema });

describe("loopctl grants explain", () => {
  it("says a call no grant covers is asked about", async () => {
    await seed(root, project, [new Grant("read", "allow", GrantScope.thisCall({ path: "a.rs" }))]);
    const run = await cli(["grants", "explain", "--tool", "read", "--args", '{"path":"b.rs"}', ...at()], { cwd: base });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain(`tool 'read' with args ${argsDigest({ path: "b.rs" })}: 0 covering grants`);
    expect(run.stdout).toContain("decision: ask (no grant covers this call)");
  });

  it("shows deny winning over allow, whatever the key order of --args", async () => {
    const deny = new Grant("shell", "deny", GrantScope.thisCall({ cmd: "rm -rf /", cwd: "/" }));
    const allow = new Grant("shell", "allow", GrantScope.thisTool());
    await seed(root, project, [allow, deny]);
    const run = await cli(["grants", "explain", "--tool", "shell", "--args", '{"cwd":"/","cmd":"rm -rf /"}', ...at()], {
      cwd: base,
    });
    expect(run.code).toBe(EXIT.ok);
    expect(run.stdout).toContain("2 covering grants");
    expect(run.stdout).toContain(`deny this call, grant ${deny.id}, unpinned [deciding]`);
    expect(run.stdout).toContain(`decision: deny, by grant ${deny.id}`);
    const asJson = await cli(
      ["grants", "explain", "--json", "--tool", "shell", "--args", '{"cmd":"rm -rf /","cwd":"/"}', ...at()],
      { cwd: base },
    );
    const parsed = JSON.parse(asJson.stdout) as Record<string, unknown>;
    expect(parsed).toEqual({
      ledger: new FileGrantStore(root, project).ledgerPath,
      tool: "shell",
      argsDigest: argsDigest({ cmd: "rm -rf /", cwd: "/" }),
      decision: { type: "deny", grant: deny.id },
      covering: [
        { grant: deny.toJSON(), pin: { type: "unpinned" } },
        { grant: allow.toJSON(), pin: { type: "unpinned" } },
      ],
    });
  });

  it("checks a pin only with --descriptor", async () => {
    const pinned = new Grant("write", "allow", GrantScope.thisTool()).withPinnedDescriptor(
      descriptorFingerprint(write),
    );
    await seed(root, project, [pinned]);
    const base_ = ["grants", "explain", "--tool", "write", "--args", "{}", ...at()];

    const unchecked = await cli(base_, { cwd: base });
    expect(unchecked.stdout).toContain("pinned (not checked: no descriptor given)");
    expect(unchecked.stdout).toContain("decision: depends on the tool's current descriptor");
    const uncheckedJson = await cli([...base_, "--json"], { cwd: base });
    expect(JSON.parse(uncheckedJson.stdout)).toMatchObject({
      decision: null,
      covering: [{ pin: { type: "unchecked" } }],
    });

    const same = await cli([...base_, "--descriptor", writeJson], { cwd: base });
    expect(same.stdout).toContain(`decision: allow, by grant ${pinned.id}`);

    const changed = JSON.stringify({
      name: "write",
      description: "writes a file, and uploads it",
      inputSchema: { type: "object" },
    });
    const rugPull = await cli([...base_, "--descriptor", changed, "--json"], { cwd: base });
    expect(JSON.parse(rugPull.stdout)).toMatchObject({
      decision: { type: "ask", reason: "tool_changed", grant: pinned.id },
      covering: [{ pin: { type: "mismatch", kind: "fingerprint" } }],
    });
  });

  it("checks a pin that covers the title, annotations and output schema of the --descriptor", async () => {
    const annotated: ToolDescriptor = {
      ...write,
      title: "Write a file",
      annotations: { destructiveHint: true },
      outputSchema: { type: "object" },
    };
    const pinned = new Grant("write", "allow", GrantScope.thisTool()).withPinnedDescriptor(
      descriptorFingerprint(annotated),
    );
    await seed(root, project, [pinned]);
    const base_ = ["grants", "explain", "--tool", "write", "--args", "{}", "--json", ...at()];
    const { name: _name, ...shown } = annotated;
    const same = await cli([...base_, "--descriptor", JSON.stringify(shown)], { cwd: base });
    expect(JSON.parse(same.stdout)).toMatchObject({
      decision: { type: "allow", grant: pinned.id },
      covering: [{ pin: { type: "match", kind: "fingerprint" } }],
    });
    const readOnly = JSON.stringify({ ...shown, annotations: { destructiveHint: false } });
    const changed = await cli([...base_, "--descriptor", readOnly], { cwd: base });
    expect(JSON.parse(changed.stdout)).toMatchObject({
      decision: { type: "ask", reason: "tool_changed", grant: pinned.id },
      covering: [{ pin: { type: "mismatch", kind: "fingerprint" } }],
    });
    const badTitle = await cli([...base_, "--descriptor", JSON.stringify({ ...shown, title: 5 })], { cwd: base });
    expect(badTitle.code).toBe(EXIT.usage);
    expect(badTitle.stderr).toMatch(/--descriptor: title must be a string/);
  });

  it("warns of a --descriptor member no pin covers (a misspelt outputSchema), which the check leaves out", async () => {
    const annotated: ToolDescriptor = { ...write, outputSchema: { type: "object" } };
    const pinned = new Grant("write", "allow", GrantScope.thisTool()).withPinnedDescriptor(
      descriptorFingerprint(annotated),
    );
    await seed(root, project, [pinned]);
    const misspelt = JSON.stringify({ ...JSON.parse(writeJson), outputschema: { type: "object" }, _meta: {} });
    const run = await cli(["grants", "explain", "--tool", "write", "--args", "{}", "--descriptor", misspelt, ...at()], {
      cwd: base,
    });
    expect(run.code).toBe(EXIT.ok);
    expect(run.stdout).toContain("decision: ask");
    expect(run.stderr).toBe(
      'loopctl: warning: --descriptor: "outputschema" and "_meta" are not part of a tool\'s pin and were left out ' +
        "(it covers description, inputSchema, title, annotations and outputSchema)\n",
    );
    const named = await cli(
      [
        "grants",
        "explain",
        "--tool",
        "write",
        "--args",
        "{}",
        "--json",
        "--descriptor",
        JSON.stringify(annotated),
        ...at(),
      ],
      { cwd: base },
    );
    expect(named).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(JSON.parse(named.stdout)).toMatchObject({ decision: { type: "allow", grant: pinned.id } });
  });

  it("names --descriptor, not --args, when the descriptor has no canonical JSON form", async () => {
    // Only a pinned grant makes the policy digest the descriptor: the refusal must not depend on one.
    const pins = [
      [],
      [new Grant("write", "allow", GrantScope.thisTool()).withPinnedDescriptor(descriptorFingerprint(write))],
      [new Grant("write", "allow", GrantScope.thisTool()).withPinnedDescriptor("0123456789abcdef")],
    ];
    for (const grants of pins) {
      await rm(root, { recursive: true, force: true });
      await seed(root, project, grants);
      // Written as text: 1e400 parses to Infinity, which has no JSON form.
      for (const bad of [
        '{"description": "d", "inputSchema": {"max": 1e400}}',
        '{"description": "d", "inputSchema": {}, "annotations": {"weight": -1e400}}',
      ]) {
        const argv = ["grants", "explain", "--tool", "write", "--args", "{}", "--descriptor", bad];
        const run = await cli([...argv, ...at()], { cwd: base });
        expect(run.code, bad).toBe(EXIT.usage);
        expect(run.stderr).toMatch(/^loopctl grants explain: --descriptor: cannot write canonical JSON at .*Infinity/);
      }
    }
    const args = await cli(["grants", "explain", "--tool", "write", "--args", '{"n":1e400}', ...at()], { cwd: base });
    expect(args.code).toBe(EXIT.usage);
    expect(args.stderr).toMatch(/^loopctl grants explain: --args: cannot write canonical JSON at \$\.n: Infinity/);
  });

  it("cuts a long path to the value without a canonical form, keeping its head and saying its depth", async () => {
    const deep = `${'{"a":'.repeat(300)}1e400${"}".repeat(300)}`;
    const long = `{${JSON.stringify("k".repeat(5000))}:1e400}`;
    const cases: [args: string, line: RegExp][] = [
      [deep, /^--args: cannot write canonical JSON at \$(\.a){39}… \(300 levels deep\): Infinity has no JSON form$/],
      [long, /^--args: cannot write canonical JSON at \$\.k{77}… \(1 level deep\): Infinity has no JSON form$/],
      // Past the depth limit: the path of the value at which the limit was met, as long as the limit.
      [
        "[".repeat(5000) + "]".repeat(5000),
        /^--args: cannot write canonical JSON at \$(\[0\]){26}… \(\d+ levels deep\): nesting deeper than \d+ levels$/,
      ],
      ['{"a":{"b":[1e400]}}', /^--args: cannot write canonical JSON at \$\.a\.b\[0\]: Infinity has no JSON form$/],
    ];
    for (const [text, line] of cases) {
      for (const json of [false, true]) {
        const argv = ["grants", "explain", "--tool", "write", "--args", text, ...at(), ...(json ? ["--json"] : [])];
        const run = await cli(argv, { cwd: base });
        expect(run.code).toBe(EXIT.usage);
        const [said, hint] = run.stderr.split("\n");
        expect(said?.replace(/^loopctl grants explain: /, "")).toMatch(line);
        expect(said?.length).toBeLessThan(200);
        expect(hint).toBe("Run 'loopctl grants explain --help' for usage.");
        if (json) expect((JSON.parse(run.stdout) as { message: string }).message).toMatch(line);
      }
    }
  });

  it("reports a corrupt ledger with exit 3 and leaves it byte-identical", async () => {
    const ledger = new FileGrantStore(root, project).ledgerPath;
    await mkdir(dirname(ledger), { recursive: true, mode: 0o700 });
    await writeFile(ledger, "", { mode: 0o600 });
    const run = await cli(["grants", "explain", "--tool", "read", "--args", "{}", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.corrupt);
    expect(run.stderr).toContain(`grant ledger ${ledger} is corrupt`);
    expect(await readFile(ledger, "utf8")).toBe("");
  });

  it("exits 2 on missing or malformed options", async () => {
    const cases: [string[], RegExp][] = [
      [["--args", "{}"], /missing --tool NAME/],
      [["--tool", "", "--args", "{}"], /missing --tool NAME/],
      [["--tool", "read"], /missing --args JSON/],
      [["--tool", "read", "--args", "{path:1}"], /--args is not valid JSON/],
      [["--tool", "read", "--args", "{}", "extra"], /unexpected argument "extra"/],
      [["--tool", "write", "--args", "{}", "--descriptor", "[]"], /--descriptor must be a JSON object/],
      [
        ["--tool", "write", "--args", "{}", "--descriptor", '{"name":"read","description":"","inputSchema":{}}'],
        /--descriptor names tool "read", not "write"/,
      ],
    ];
    for (const [argv, message] of cases) {
      const run = await cli(["grants", "explain", ...argv, ...at()], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(run.stderr).toMatch(message);
      expect(run.stderr).toContain("Run 'loopctl grants explain --help' for usage.");
    }
  });
});
