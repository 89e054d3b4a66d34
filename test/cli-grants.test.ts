import { spawn } from "node:child_process";
import { watch } from "node:fs";
import { chmod, link, lstat, mkdir, readdir, readFile, symlink, unlink, writeFile } from "node:fs/promises";
import { hostname } from "node:os";
import { dirname, join } from "node:path";
import { describe, expect, it } from "vitest";
import { EXIT, runCli } from "../src/cli/index.js";
import { FileGrantStore, Grant, GrantScope } from "../src/grant/index.js";
import { cli } from "./support/cli-harness.js";
import { sampleGrants, seed, useTempProject } from "./support/cli-grants-fixtures.js";

let base: string;
let root: string;
let project: string;

useTempProject((made) => ({ base, root, project } = made));

const at = (): string[] => ["--root", root, "--project", project];

describe("loopctl grants list", () => {
  it("says so when there are no grants", async () => {
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain(`ledger: ${new FileGrantStore(root, project).ledgerPath}`);
    expect(run.stdout).toContain("no grants");
    const asJson = await cli(["grants", "list", ...at(), "--json"], { cwd: base });
    expect(JSON.parse(asJson.stdout)).toEqual({ ledger: new FileGrantStore(root, project).ledgerPath, grants: [] });
  });

  it("warns on stderr when --project names no folder, and still lists (or resets) the grants kept under that path", async () => {
    const gone = join(base, "deleted-project");
    await seed(root, gone, [sampleGrants()[0] as Grant]);
    const run = await cli(["grants", "list", "--root", root, "--project", gone], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expect(run.stderr).toBe(
      `loopctl: warning: the project folder ${gone} does not exist; these are the grants kept under that path\n`,
    );
    expect(run.stdout).toContain("1 grant");
    const reset = await cli(["grants", "reset", "--root", root, "--project", gone], { cwd: base });
    expect(reset.code).toBe(EXIT.ok);
    expect(reset.stderr).toContain("does not exist");
  });

  it("warns on stderr when --project names a file, as the ledger itself would be named by mistake", async () => {
    const store = await seed(root, project, [sampleGrants()[0] as Grant]);
    const ledger = store.ledgerPath;
    const before = await readFile(ledger, "utf8");
    for (const command of [
      ["grants", "list"],
      ["grants", "reset"],
    ]) {
      const run = await cli([...command, "--root", root, "--project", ledger], { cwd: base });
      expect(run.code, command.join(" ")).toBe(EXIT.ok);
      expect(run.stderr, command.join(" ")).toBe(
        `loopctl: warning: the project folder ${ledger} is a file, not a folder; these are the grants kept under that path\n`,
      );
    }
    expect(await readFile(ledger, "utf8")).toBe(before);
  });

  it("warns when a --root or --project starting with a ~ the shell left as it is names no folder", async () => {
    // bash expands ~ in --root ~/x, not in --root=~/x: that is a folder named ~ in the current folder.
    const grants = sampleGrants();
    await seed(root, project, grants);
    const here = join(base, "~", "grants");
    for (const command of [
      ["grants", "list"],
      ["grants", "reset", "--tool", "read"],
    ]) {
      const run = await cli([...command, "--root=~/grants", "--project", project], { cwd: base });
      expect(run.code, command.join(" ")).toBe(EXIT.ok);
      expect(run.stderr).toBe(
        `loopctl: warning: the grant root ${here} does not exist: the shell leaves a ~ after = as it is ` +
          "(--root=~/…); write --root ~/… or $HOME/…\n",
      );
    }
    const gone = await cli(["grants", "list", "--root", root, "--project=~/app"], { cwd: base });
    expect(gone.stderr).toBe(
      `loopctl: warning: the project folder ${join(base, "~", "app")} does not exist; these are the grants kept ` +
        "under that path; the shell leaves a ~ after = as it is (--project=~/…); write --project ~/… or $HOME/…\n",
    );
    // A folder named ~ that exists is taken as it is, with no warning.
    await mkdir(here, { recursive: true });
    const made = await cli(["grants", "list", "--root=~/grants", "--project", project], { cwd: base });
    expect(made).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(await new FileGrantStore(root, project).load()).toHaveLength(grants.length);
  });

  it("prints a table of every grant", async () => {
    const grants = sampleGrants();
    await seed(root, project, grants);
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    const lines = run.stdout.split("\n");
    expect(lines[1]).toMatch(/^ID\s+TOOL\s+VERDICT\s+SCOPE\s+PINNED\s+CREATED\s+NOTE$/);
    for (const grant of grants) {
      expect(lines.find((l) => l.startsWith(grant.id))).toBeDefined();
    }
    expect(run.stdout).toMatch(/read\s+allow\s+this_tool\s+-\s+2026-01-02T03:04:05Z\s+-/);
    expect(run.stdout).toContain('this_call {"cmd":"rm -rf /","cwd":"/"}');
    expect(run.stdout).toContain("never");
    expect(run.stdout).toContain("sha256:abababababab…");
    expect(run.stdout).toContain("3 grants\n");
  });

  it("prints ledger records with --json", async () => {
    const grants = sampleGrants();
    const store = await seed(root, project, grants);
    const run = await cli(["grants", "list", "--json", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    const parsed = JSON.parse(run.stdout) as { ledger: string; grants: unknown[] };
    expect(parsed.ledger).toBe(store.ledgerPath);
    expect(parsed.grants).toHaveLength(3);
    expect(parsed.grants).toEqual(expect.arrayContaining(grants.map((g) => g.toJSON())));
  });

  it("defaults --project to cwd and --root to $XDG_STATE_HOME/loopctl/grants", async () => {
    const state = join(base, "state");
    await seed(join(state, "loopctl", "grants"), project, [sampleGrants()[0] as Grant]);
    const run = await cli(["grants", "list", "--json"], { cwd: project, env: { XDG_STATE_HOME: state } });
    expect(run.code).toBe(EXIT.ok);
    const parsed = JSON.parse(run.stdout) as { ledger: string; grants: { tool: string }[] };
    expect(parsed.ledger.startsWith(join(state, "loopctl", "grants"))).toBe(true);
    expect(parsed.grants.map((g) => g.tool)).toEqual(["read"]);
  });

  it("resolves relative --root and --project against cwd", async () => {
    await seed(root, project, sampleGrants());
    const run = await cli(["grants", "list", "--root", "grants-root", "--project", "project", "--json"], { cwd: base });
    expect((JSON.parse(run.stdout) as { grants: unknown[] }).grants).toHaveLength(3);
  });

  it("shows control characters and bidi overrides in a tool name as escapes", async () => {
    await seed(root, project, [
      new Grant("evil\u001b[2J", "allow", GrantScope.thisTool()),
      new Grant("daer\u202etxt.exe", "allow", GrantScope.thisTool()),
    ]);
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.stdout).toContain("evil\\u001b[2J");
    expect(run.stdout).toContain("daer\\u202etxt.exe");
    expect(run.stdout).not.toMatch(/[\u001b\u202e]/);
  });
});

describe("loopctl grants revoke", () => {
  it("removes a known grant", async () => {
    const grants = sampleGrants();
    const store = await seed(root, project, grants);
    const shell = grants[1] as Grant;
    const run = await cli(["grants", "revoke", shell.id, ...at()], { cwd: base });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(run.stdout).toContain(`revoked ${shell.id} (deny shell, this_call`);
    expect((await store.load()).map((g) => g.id).sort()).toEqual(
      [grants[0], grants[2]].map((g) => (g as Grant).id).sort(),
    );
  });

  it("exits 1 for an unknown id and changes nothing", async () => {
    const store = await seed(root, project, sampleGrants());
    const before = await readFile(store.ledgerPath);
    const run = await cli(["grants", "revoke", "0123456789abcdef", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.failed);
    expect(run.stderr).toBe(`loopctl grants revoke: no grant 0123456789abcdef in ${store.ledgerPath}\n`);
    expect(await readFile(store.ledgerPath)).toEqual(before);
  });
});

describe("a record whose content was edited and its id kept", () => {
  // The id is the digest of tool, verdict and scope: what the record holds now is what is listed,
  // decided and revoked, under the id of that content, and the stored one is named to say so.
  it("is listed, and revoked, under the id of its content; list and revoke both name the id the file holds", async () => {
    const grants = sampleGrants();
    const store = await seed(root, project, grants);
    const read = grants[0] as Grant;
    const edited = new Grant("read", "deny", GrantScope.thisTool()).withCreatedAtMs(read.createdAtMs);
    const text = await readFile(store.ledgerPath, "utf8");
    await writeFile(store.ledgerPath, text.replace('"verdict":"Allow"', '"verdict":"Deny"'));
    const said =
      `record 0 of ${store.ledgerPath} holds id ${read.id}, but its tool, verdict and scope (deny read, this_tool) ` +
      `are grant ${edited.id}: it is listed, decided and revoked as ${edited.id}`;

    const list = await cli(["grants", "list", ...at()], { cwd: base });
    expect(list.code).toBe(EXIT.ok);
    expect(list.stdout).toContain(`${edited.id}  read`);
    expect(list.stdout).not.toContain(read.id);
    expect(list.stderr).toBe(`loopctl: warning: ${said}\n`);
    const asJson = await cli(["grants", "list", "--json", ...at()], { cwd: base });
    expect(asJson.stderr).toBe(`loopctl: warning: ${said}\n`);

    const byStored = await cli(["grants", "revoke", read.id, ...at()], { cwd: base });
    expect(byStored.code).toBe(EXIT.failed);
    expect(byStored.stderr).toBe(`loopctl grants revoke: no grant ${read.id} in ${store.ledgerPath}; ${said}\n`);
    expect((await store.load()).map((g) => g.id)).toContain(edited.id);

    const byContent = await cli(["grants", "revoke", edited.id, ...at()], { cwd: base });
    expect(byContent).toMatchObject({ code: EXIT.ok, stderr: "" });
    expect(byContent.stdout).toBe(`revoked ${edited.id} (deny read, this_tool)\n`);
    expect((await store.load()).map((g) => g.id)).toEqual([(grants[1] as Grant).id, (grants[2] as Grant).id]);
  });

  it("names the tool of such a record in JSON's escapes when it holds a comma, a bracket or a newline", async () => {
    const forged = "x, this_tool) are grant 0000000000000000\n";
    const kept = new Grant(forged, "allow", GrantScope.thisTool());
    const store = await seed(root, project, [kept]);
    const edited = new Grant(forged, "deny", GrantScope.thisTool());
    const text = await readFile(store.ledgerPath, "utf8");
    await writeFile(store.ledgerPath, text.replace('"verdict":"Allow"', '"verdict":"Deny"'));
    const list = await cli(["grants", "list", ...at()], { cwd: base });
    expect(list.code).toBe(EXIT.ok);
    expect(list.stderr).toBe(
      `loopctl: warning: record 0 of ${store.ledgerPath} holds id ${kept.id}, but its tool, verdict and scope ` +
        `(deny "x, this_tool) are grant 0000000000000000\\n", this_tool) ` +
        `are grant ${edited.id}: it is listed, decided and revoked as ${edited.id}\n`,
    );
  });

  it("is named in a ledger that starts with a byte-order mark, which the store reads", async () => {
    const grants = sampleGrants();
    const store = await seed(root, project, grants);
    const read = grants[0] as Grant;
    const edited = new Grant("read", "deny", GrantScope.thisTool());
    const text = await readFile(store.ledgerPath, "utf8");
    await writeFile(store.ledgerPath, `\ufeff${text.replace('"verdict":"Allow"', '"verdict":"Deny"')}`);
    const said =
      `record 0 of ${store.ledgerPath} holds id ${read.id}, but its tool, verdict and scope (deny read, this_tool) ` +
      `are grant ${edited.id}: it is listed, decided and revoked as ${edited.id}`;

    const list = await cli(["grants", "list", ...at()], { cwd: base });
    expect(list.code).toBe(EXIT.ok);
    expect(list.stdout).toContain(`${edited.id}  read`);
    expect(list.stderr).toBe(`loopctl: warning: ${said}\n`);
    const byStored = await cli(["grants", "revoke", read.id, ...at()], { cwd: base });
    expect(byStored.code).toBe(EXIT.failed);
    expect(byStored.stderr).toBe(`loopctl grants revoke: no grant ${read.id} in ${store.ledgerPath}; ${said}\n`);
  });
});

describe("loopctl grants reset", () => {
  it("removes every grant", async () => {
    const store = await seed(root, project, sampleGrants());
    const run = await cli(["grants", "reset", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expect(run.stdout).toBe(`removed 3 grants from ${store.ledgerPath}\n`);
    expect(await store.load()).toEqual([]);
  });

  it("removes only one tool's grants with --tool", async () => {
    const grants = [...sampleGrants(), new Grant("read", "deny", GrantScope.thisCall({ path: "/etc/shadow" }))];
    const store = await seed(root, project, grants);
    const run = await cli(["grants", "reset", "--tool", "read", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expect(run.stdout).toBe(`removed 2 grants of tool "read" from ${store.ledgerPath}\n`);
    expect((await store.load()).map((g) => g.tool).sort()).toEqual(["shell", "write"]);
    const none = await cli(["grants", "reset", "--tool", "Read", ...at()], { cwd: base });
    expect(none.stdout).toContain("removed 0 grants");
  });

  it("says a warning about the project folder once, when a --tool that matched nothing is checked for near names", async () => {
    const gone = join(base, "deleted-project");
    await seed(root, gone, [new Grant("Deploy", "allow", GrantScope.thisTool())]);
    const run = await cli(["grants", "reset", "--tool", "deploy", "--root", root, "--project", gone], { cwd: base });
    expect(run.code).toBe(EXIT.ok);
    expect(run.stdout).toContain("removed 0 grants");
    expect(run.stderr).toBe(
      `loopctl: warning: the project folder ${gone} does not exist; these are the grants kept under that path\n` +
        'loopctl grants reset: the name matches exactly; grants of "Deploy" are left in force\n',
    );
  });

  it.skipIf(process.platform !== "linux")(
    "replaces the ledger once with --tool, however many grants the tool has",
    async () => {
      const reads = Array.from({ length: 30 }, (_, i) => new Grant("read", "allow", GrantScope.thisCall({ i })));
      const store = await seed(root, project, [...sampleGrants(), ...reads]);
      const folder = dirname(store.ledgerPath);
      const names: string[] = [];
      let seen: () => void = () => undefined;
      const sentinel = new Promise<void>((resolve) => (seen = resolve));
      const watcher = watch(folder, (_, name) => {
        if (name === "end") seen();
        else if (name === "grants.json") names.push(name);
      });
      try {
        const run = await cli(["grants", "reset", "--tool", "read", ...at()], { cwd: base });
        expect(run.stdout).toBe(`removed 31 grants of tool "read" from ${store.ledgerPath}\n`);
        // The watcher reports events in order: once it has seen this file, it has seen every replacement.
        await writeFile(join(folder, "end"), "");
        await sentinel;
      } finally {
        watcher.close();
      }
      expect(names).toEqual(["grants.json"]);
      expect((await store.load()).map((g) => g.tool).sort()).toEqual(["shell", "write"]);
    },
  );
});

const REPAIR_HINT =
  "loopctl: run 'loopctl grants repair' with the same --project and --root to move it aside " +
  "(its bytes kept) and start a fresh ledger\n";

/** Writes `content` as the project's ledger, bypassing the store. */
async function plantLedger(content: string): Promise<string> {
  const ledger = new FileGrantStore(root, project).ledgerPath;
  await mkdir(dirname(ledger), { recursive: true, mode: 0o700 });
  await writeFile(ledger, content, { mode: 0o600 });
  return ledger;
}

describe("a corrupt ledger", () => {
  it("is reported with exit 3 by every command and left byte-identical", async () => {
    const ledger = new FileGrantStore(root, project).ledgerPath;
    await mkdir(dirname(ledger), { recursive: true, mode: 0o700 });
    const garbage = '[{"id":"x","tool":"read","verdict":"Allow","scope":"this_tool"},{oops';
    await writeFile(ledger, garbage, { mode: 0o600 });
    const commands = [
      ["grants", "list"],
      ["grants", "revoke", "0123456789abcdef"],
      ["grants", "reset"],
      ["grants", "reset", "--tool", "read"],
    ];
    for (const argv of commands) {
      const run = await cli([...argv, ...at()], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.corrupt);
      expect(run.stdout).toBe("");
      expect(run.stderr).toContain(ledger);
      expect(run.stderr).toContain("[LEDGER_CORRUPT]");
      expect(run.stderr.endsWith(REPAIR_HINT)).toBe(true);
      expect(await readFile(ledger, "utf8")).toBe(garbage);
    }
  });

  it("is reported as a JSON document on stdout with --json, the same on stderr, exit 3", async () => {
    const garbage = '[{"id":"x",';
    const ledger = await plantLedger(garbage);
    const commands = [
      ["grants", "list", "--json"],
      ["grants", "explain", "--tool", "read", "--args", "{}", "--json"],
    ];
    for (const argv of commands) {
      const run = await cli([...argv, ...at()], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.corrupt);
      expect(JSON.parse(run.stdout)).toEqual({
        ledger,
        error: "LEDGER_CORRUPT",
        message: expect.stringContaining(`grant ledger ${ledger} is corrupt`),
        hint: REPAIR_HINT.slice("loopctl: ".length, -1),
      });
      expect(run.stderr).toContain("[LEDGER_CORRUPT]");
      expect(run.stderr.endsWith(REPAIR_HINT)).toBe(true);
      expect(await readFile(ledger, "utf8")).toBe(garbage);
    }
  });

  it("says what is wrong with a record in one readable line", async () => {
    await plantLedger(JSON.stringify([{ id: "x", tool: 5, verdict: "Maybe", scope: { this_call: {} } }]));
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.corrupt);
    const [first, ...rest] = run.stderr.split("\n");
    expect(rest.join("\n")).toBe(REPAIR_HINT);
    expect(first).toMatch(
      /record 0: grant record "x" \(tool "5"\) is invalid: tool: .*expected string, received number; verdict: .*"Allow"\|"Deny"; scope: /,
    );
    expect(first).not.toMatch(/\\u000a|✖|→/);
  });

  it("is moved aside by grants repair, which says where; the next list starts afresh", async () => {
    const garbage = '[{"id":"x",';
    const ledger = await plantLedger(garbage);
    const run = await cli(["grants", "repair", ...at()], { cwd: base });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: "" });
    const aside = /moved the corrupt ledger aside to (\S+)/.exec(run.stdout)?.[1];
    expect(aside).toBeDefined();
    expect(aside?.startsWith(`${ledger}.corrupt-`)).toBe(true);
    expect(run.stdout).toContain(ledger);
    expect(await readFile(aside as string, "utf8")).toBe(garbage);
    await expect(readFile(ledger)).rejects.toMatchObject({ code: "ENOENT" });
    const list = await cli(["grants", "list", ...at()], { cwd: base });
    expect(list.code).toBe(EXIT.ok);
    expect(list.stdout).toContain("no grants");
  });
});

describe("a ledger in a later format", () => {
  const later = '{"version":2,"grants":[]}';
  const message = (ledger: string): string =>
    `grant ledger ${ledger} is in ledger format version 2, which this version of loopctl cannot read ` +
    "(it reads the JSON array of grant records); it was likely written by a newer loopctl: upgrade to use its grants";
  const hint =
    "the ledger is left as it is: upgrade loopctl ('loopctl --version' shows this one) to use its grants; " +
    "'loopctl grants repair' never moves a ledger of a later format aside";

  it("is reported with exit 3 by every command, repair included, pointing to an upgrade, and left where it is", async () => {
    const ledger = await plantLedger(later);
    for (const argv of [
      ["grants", "list"],
      ["grants", "revoke", "0123456789abcdef"],
      ["grants", "reset"],
      ["grants", "reset", "--tool", "read"],
      ["grants", "explain", "--tool", "read", "--args", "{}"],
      ["grants", "repair"],
    ]) {
      const run = await cli([...argv, ...at()], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.corrupt);
      expect(run.stdout, argv.join(" ")).toBe("");
      expect(run.stderr, argv.join(" ")).toBe(
        `loopctl: ${message(ledger)} [LEDGER_UNKNOWN_FORMAT]\nloopctl: ${hint}\n`,
      );
      expect(await readFile(ledger, "utf8")).toBe(later);
      expect(await readdir(dirname(ledger))).toEqual(["grants.json"]);
    }
  });

  it("is reported as a JSON document with --json, naming the code and the upgrade", async () => {
    const ledger = await plantLedger(later);
    const run = await cli(["grants", "list", "--json", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.corrupt);
    expect(JSON.parse(run.stdout)).toEqual({ ledger, error: "LEDGER_UNKNOWN_FORMAT", message: message(ledger), hint });
  });
});

describe("a ledger with two names (a hard link)", () => {
  it("is reported with exit 4 by every command, repair included, and left as it is, corrupt or not", async () => {
    for (const content of [JSON.stringify(sampleGrants().map((g) => g.toJSON())), '[{"id":"x",']) {
      const ledger = await plantLedger(content);
      const other = join(base, "grants-copy.json");
      await link(ledger, other);
      for (const argv of [
        ["grants", "list"],
        ["grants", "revoke", "0123456789abcdef"],
        ["grants", "reset"],
        ["grants", "repair"],
      ]) {
        const run = await cli([...argv, ...at()], { cwd: base });
        expect(run.code, argv.join(" ")).toBe(EXIT.io);
        expect(run.stdout, argv.join(" ")).toBe("");
        expect(run.stderr, argv.join(" ")).toBe(
          `loopctl: grant ledger ${ledger}: has 2 names (hard links); refusing to read or write it: a writer ` +
            `through another name would take another lock (${ledger}.lock is beside this one) and the names ` +
            "would part, losing changes; remove the other names (copy the ledger rather than link it) " +
            "[LEDGER_UNSAFE_PATH]\n",
        );
        expect(await readFile(ledger, "utf8")).toBe(content);
        expect((await readdir(dirname(ledger))).filter((name) => name !== "grants.json.lock")).toEqual(["grants.json"]);
      }
      await unlink(other);
    }
  });
});

describe("a --root under a regular file", () => {
  it("is refused with exit 4 by every command, as a --root that is the file, not read as no grants", async () => {
    const file = join(base, "afile");
    await writeFile(file, "x");
    for (const at of [file, join(file, "x")]) {
      for (const argv of [
        ["grants", "list"],
        ["grants", "revoke", "0123456789abcdef"],
        ["grants", "reset"],
        ["grants", "repair"],
      ]) {
        const run = await cli([...argv, "--root", at, "--project", project], { cwd: base });
        expect(run.code, `${argv.join(" ")} --root ${at}`).toBe(EXIT.io);
        expect(run.stdout, argv.join(" ")).toBe("");
        expect(run.stderr, argv.join(" ")).toMatch(
          new RegExp(
            `^loopctl: grant ledger folder ${at}: (is not a folder|is under ${file}, which is a file, not a folder); refusing to use the ledger .* \\[LEDGER_UNSAFE_PATH\\]\n$`,
          ),
        );
      }
    }
    expect(await readFile(file, "utf8")).toBe("x");
  });
});

describe("loopctl grants repair", () => {
  it("refuses to touch a sound ledger, and says there is nothing to repair when there is none", async () => {
    const store = await seed(root, project, sampleGrants());
    const before = await readFile(store.ledgerPath);
    const run = await cli(["grants", "repair", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.failed);
    expect(run.stdout).toBe("");
    expect(run.stderr).toBe(`loopctl grants repair: ${store.ledgerPath} is not corrupt; left as it is\n`);
    expect(await readFile(store.ledgerPath)).toEqual(before);
    await store.clear();
    const other = join(base, "elsewhere");
    await mkdir(other);
    const none = await cli(["grants", "repair", "--root", root, "--project", other], { cwd: base });
    expect(none.code).toBe(EXIT.failed);
    expect(none.stderr).toBe(
      `loopctl grants repair: no ledger at ${new FileGrantStore(root, other).ledgerPath}; nothing to repair\n`,
    );
  });

  it("refuses --schema without --database, leaving a corrupt ledger where it is", async () => {
    // Meant for the database and left without --database, it must not move the project's ledger file aside.
    const garbage = '[{"id":"x",';
    const ledger = await plantLedger(garbage);
    for (const argv of [
      ["grants", "repair", ...at(), "--schema", "loopctl"],
      ["grants", "repair", ...at(), "--schema="],
    ]) {
      const run = await cli(argv, { cwd: base });
      expect(run, argv.join(" ")).toMatchObject({ code: EXIT.usage, stdout: "" });
      expect(run.stderr).toBe(
        "loopctl grants repair: --schema needs --database\nRun 'loopctl grants repair --help' for usage.\n",
      );
      expect(await readFile(ledger, "utf8")).toBe(garbage);
    }
  });
});

describe("a ledger swapped for a symbolic link", () => {
  it("is refused with exit 4 and never written through", async () => {
    const ledger = new FileGrantStore(root, project).ledgerPath;
    await mkdir(dirname(ledger), { recursive: true, mode: 0o700 });
    const target = join(base, "elsewhere.json");
    const content = JSON.stringify([sampleGrants()[0]?.toJSON()]);
    await writeFile(target, content);
    await symlink(target, ledger);
    for (const argv of [
      ["grants", "list"],
      ["grants", "reset"],
      ["grants", "revoke", (sampleGrants()[0] as Grant).id],
    ]) {
      const run = await cli([...argv, ...at()], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.io);
      expect(run.stderr).toContain(ledger);
      expect(run.stderr).toContain("[LEDGER_NOT_REGULAR_FILE]");
      expect(await readFile(target, "utf8")).toBe(content);
    }
  });
});

describe("a ledger lock swapped for a symbolic link", () => {
  it("is refused with exit 4, named as a symbolic link, and never followed", async () => {
    const store = await seed(root, project, [sampleGrants()[0] as Grant]);
    const target = join(base, "elsewhere.lock");
    await writeFile(target, "kept");
    await symlink(target, store.lockPath);
    const run = await cli(["grants", "reset", ...at()], { cwd: base });
    expect(run.code).toBe(EXIT.io);
    expect(run.stderr).toBe(
      `loopctl: grant ledger lock ${store.lockPath}: is a symbolic link, so no writer made it; refusing to follow it; ` +
        "remove it [LEDGER_LOCK]\n",
    );
    expect(await readFile(target, "utf8")).toBe("kept");
    expect(await new FileGrantStore(root, project).load()).toHaveLength(1);
  });
});

describe("usage", () => {
  it("exits 2 with a message naming what is wrong", async () => {
    const cases: [string[], RegExp][] = [
      [[], /^loopctl: inspect/],
      [["grants"], /^loopctl grants:/],
      [["grants", "nope"], /unknown command "grants nope"/],
      [["frobnicate"], /unknown command "frobnicate"/],
      [["--jsn"], /unknown option "--jsn"/],
      [["grants", "list", "extra"], /loopctl grants list: unexpected argument "extra"/],
      [["grants", "list", "--bogus"], /unknown option "--bogus"\n/],
      [["grants", "list", "-x"], /unknown option "-x"\n/],
      [["grants", "list", "--root"], /--root/],
      [["grants", "revoke"], /missing the ID/],
      [["grants", "revoke", "NOT-AN-ID"], /"NOT-AN-ID" is not a grant id/],
      [["grants", "revoke", "0123456789abcdef", "more"], /unexpected argument "more"/],
      [["grants", "reset", "--tool"], /--tool/],
      [["grants", "reset", "--tool", ""], /--tool needs a tool name/],
      [["--version", "x"], /unexpected argument "x"/],
    ];
    for (const [argv, message] of cases) {
      const run = await cli([...argv], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(run.stdout, argv.join(" ")).toBe("");
      expect(run.stderr, argv.join(" ")).toMatch(message);
    }
  });

  it("points a --tool given to list or revoke to the commands that take one", async () => {
    const cases: [string[], string][] = [
      [
        ["grants", "list", "--tool", "read"],
        'loopctl grants list: unknown option "--tool"; list shows the grants of every tool: ' +
          "'loopctl grants explain --tool NAME --args JSON' shows those that decide one call of a tool, " +
          "'loopctl grants reset --tool NAME' removes one tool's\n",
      ],
      [
        ["grants", "revoke", "--tool=read"],
        'loopctl grants revoke: unknown option "--tool"; revoke removes one grant by its ID: ' +
          "'loopctl grants reset --tool NAME' removes every grant of one tool\n",
      ],
    ];
    for (const [argv, message] of cases) {
      const run = await cli([...argv, ...at()], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(run.stderr, argv.join(" ")).toBe(
        `${message}Run '${argv.slice(0, 2).join(" ").replace(/^/, "loopctl ")} --help' for usage.\n`,
      );
    }
  });

  it("suggests the option or command meant by a near miss", async () => {
    const cases: [string[], string][] = [
      [["grants", "list", "--roto", "x"], 'unknown option "--roto"; did you mean --root?'],
      [["grants", "list", "--jsn"], 'unknown option "--jsn"; did you mean --json?'],
      [["grants", "list", "--projcet=."], 'unknown option "--projcet"; did you mean --project?'],
      [["grants", "explain", "--tol", "read"], 'unknown option "--tol"; did you mean --tool?'],
      [["grants", "reset", "--to", "read"], 'unknown option "--to"; did you mean --tool?'],
      [["grants", "lsit"], 'unknown command "grants lsit"; did you mean "grants list"?'],
      [["grant", "list"], 'unknown command "grant"; did you mean "grants"?'],
      [["--verison"], 'unknown option "--verison"; did you mean --version?'],
      // A long option written with one dash is named as written, not as the letter the parser stopped at.
      [["grants", "list", "-project", "."], 'unknown option "-project"; did you mean --project?'],
      [["grants", "reset", "-tool=read"], 'unknown option "-tool"; did you mean --tool?'],
      [["audit", "verify", "-json", "log"], 'unknown option "-json"; did you mean --json?'],
      [["console", "-port", "8080"], 'unknown option "-port"; did you mean --port?'],
      [["-version"], 'unknown option "-version"; did you mean --version?'],
      [["grants", "-help"], 'unknown option "-help"; did you mean --help?'],
    ];
    for (const [argv, message] of cases) {
      const run = await cli(argv, { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(run.stderr, argv.join(" ")).toContain(`: ${message}\n`);
    }
  });

  it("prints help for every command with -h and --help", async () => {
    const commands: [string[], string][] = [
      [[], "loopctl: inspect"],
      [["grants"], "loopctl grants:"],
      [["grants", "list"], "loopctl grants list:"],
      [["grants", "revoke"], "loopctl grants revoke:"],
      [["grants", "reset"], "loopctl grants reset:"],
      [["grants", "explain"], "loopctl grants explain:"],
      [["grants", "repair"], "loopctl grants repair:"],
      [["audit"], "loopctl audit:"],
      [["audit", "verify"], "loopctl audit verify:"],
      [["console"], "loopctl console:"],
    ];
    for (const [argv, title] of commands) {
      for (const flag of ["--help", "-h"]) {
        const run = await cli([...argv, flag], { cwd: base });
        expect(run.code, `${argv.join(" ")} ${flag}`).toBe(EXIT.ok);
        expect(run.stdout.startsWith(title)).toBe(true);
        expect(run.stdout).toContain("Exit codes:\n  0  done\n  1  ");
        expect(run.stdout).toMatch(/please report it at\s+https:\/\/github\.com\/loopctl\/loopctl\/issues\)/);
        for (const line of run.stdout.split("\n")) expect(line.length, line).toBeLessThanOrEqual(80);
        expect(run.stderr).toBe("");
      }
    }
  });

  it("lists as an option only what the command takes: repair, which refuses --database, does not offer it", async () => {
    const repair = await cli(["grants", "repair", "--help"], { cwd: base });
    const options = repair.stdout.slice(repair.stdout.indexOf("\nOptions:\n"), repair.stdout.indexOf("\nExit codes:"));
    expect(options).toContain("--project DIR");
    expect(options).not.toMatch(/^ {2}--(database|schema)\b/m);
    const refused = await cli(["grants", "repair", "--database", "postgres://h/db", "--project", "p"], { cwd: base });
    expect(refused.code).toBe(EXIT.usage);
    const top = await cli(["--help"], { cwd: base });
    expect(top.stdout).not.toContain("Every grants command also takes --database");
    expect(top.stdout).toContain("Every grants command but repair also takes --database");
  });

  it("resolves to exit 5, never rejects, when its output streams fail", async () => {
    const broken = {
      write: (): never => {
        throw new Error("EPIPE");
      },
    };
    let stderr = "";
    const code = await runCli(["grants", "list", ...at()], {
      stdout: broken,
      stderr: { write: (chunk: string) => (stderr += chunk) },
      env: {},
      cwd: base,
    });
    expect(code).toBe(EXIT.internal);
    expect(stderr).toBe(
      "loopctl: unexpected error (a bug: please report it at https://github.com/loopctl/loopctl/issues): EPIPE\n",
    );
    const both = await runCli(["grants", "list", ...at()], { stdout: broken, stderr: broken, env: {}, cwd: base });
    expect(both).toBe(EXIT.internal);
  });

  it("with --json, prints an unexpected error (exit 5) as one JSON document on stdout", async () => {
    // The warning about a missing project folder fails to reach stderr: an error no command expects.
    let stdout = "";
    const failing = {
      write: (): never => {
        throw new Error("EIO: stderr is gone");
      },
    };
    const code = await runCli(["grants", "list", "--json", "--root", root, "--project", join(base, "gone")], {
      stdout: { write: (chunk: string) => (stdout += chunk) },
      stderr: failing,
      env: {},
      cwd: base,
    });
    expect(code).toBe(EXIT.internal);
    expect(JSON.parse(stdout)).toEqual({
      error: "INTERNAL",
      message: "EIO: stderr is gone",
      hint: "a bug: please report it at https://github.com/loopctl/loopctl/issues",
    });
  });

  it("prints the version, for --version and -v alike, which the help names both", async () => {
    for (const flag of ["--version", "-v"]) {
      const run = await cli([flag], { cwd: base });
      expect(run, flag).toEqual({ code: EXIT.ok, stdout: "0.1.0\n", stderr: "" });
    }
    expect((await cli(["--help"], { cwd: base })).stdout).toContain("\n  loopctl --version (-v) [--json]\n");
  });

  it("prints the version as one JSON document with --json on either side, as the help is", async () => {
    for (const argv of [
      ["--version", "--json"],
      ["--json", "--version"],
      ["-v", "--json"],
      ["--json", "-v"],
    ]) {
      const run = await cli(argv, { cwd: base });
      expect(run, argv.join(" ")).toEqual({ code: EXIT.ok, stdout: '{\n  "version": "0.1.0"\n}\n', stderr: "" });
    }
    for (const [argv, message] of [
      [["--version", "--json", "x"], 'unexpected argument "x"'],
      [["--json", "--version", "--bogus"], 'unexpected argument "--bogus"'],
      [["--version", "--json=1"], 'unexpected argument "--json=1"'],
    ] as const) {
      const run = await cli([...argv], { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(JSON.parse(run.stdout), argv.join(" ")).toEqual({
        error: "USAGE",
        message,
        hint: "run 'loopctl --help' for usage",
      });
    }
  });
});

describe("modes and warnings", () => {
  const modeOf = async (path: string): Promise<number> => (await lstat(path)).mode & 0o7777;

  /** A saved ledger whose folders (root included) are 0755 and whose file is 0644, and those four paths. */
  async function openTree(grantsRoot: string): Promise<string[]> {
    const store = await seed(grantsRoot, project, sampleGrants());
    const paths = [grantsRoot, join(grantsRoot, "projects"), dirname(store.ledgerPath), store.ledgerPath];
    for (const path of paths) await chmod(path, path === store.ledgerPath ? 0o644 : 0o755);
    return paths;
  }

  it("grants list leaves every mode as it found it, and warns on stderr of a ledger others can read", async () => {
    const paths = await openTree(root);
    const ledger = paths[3] as string;
    const warning =
      `loopctl: warning: the grant ledger ${ledger} is readable by others (mode 0644), who can see what this ` +
      `project's agent may do without asking; run chmod 600 ${ledger} (the next change to the grants writes it ` +
      "owner-only too)\n";
    const run = await cli(["grants", "list", ...at()], { cwd: base });
    expect(run).toMatchObject({ code: EXIT.ok, stderr: warning });
    expect(run.stdout).toContain("3 grants");
    const asJson = await cli(["grants", "list", ...at(), "--json"], { cwd: base });
    expect(asJson).toMatchObject({ code: EXIT.ok, stderr: warning });
    expect((JSON.parse(asJson.stdout) as { grants: unknown[] }).grants).toHaveLength(3);
    expect(await Promise.all(paths.map(modeOf))).toEqual([0o755, 0o755, 0o755, 0o644]);
    await chmod(ledger, 0o600);
    expect(await cli(["grants", "list", ...at()], { cwd: base })).toMatchObject({ code: EXIT.ok, stderr: "" });
  });

  it("grants list --root . leaves the current folder as it is", async () => {
    const here = join(base, "here");
    await mkdir(here, { mode: 0o755 });
    await chmod(here, 0o755);
    await openTree(here);
    const run = await cli(["grants", "list", "--root", ".", "--project", project, "--json"], { cwd: here });
    expect(run.code).toBe(EXIT.ok);
    expect((JSON.parse(run.stdout) as { grants: unknown[] }).grants).toHaveLength(3);
    expect(await modeOf(here)).toBe(0o755);
  });

  it("a sticky folder writable by all, like /tmp, is a root that works as it is, with no advice to change it", async () => {
    const sticky = join(base, "tmp-like");
    await mkdir(sticky);
    await chmod(sticky, 0o1777);
    const at1777 = ["--root", sticky, "--project", project];
    const [first] = sampleGrants();
    await seed(sticky, project, [first as Grant]);
    for (const argv of [
      ["grants", "list"],
      ["grants", "revoke", (first as Grant).id],
    ]) {
      const run = await cli([...argv, ...at1777], { cwd: base });
      expect(run, argv.join(" ")).toMatchObject({ code: EXIT.ok, stderr: "" });
    }
    expect(await modeOf(sticky)).toBe(0o1777);
  });

  it("a change that makes a folder owner-only says so in one plain line, not as a Node process warning", async () => {
    const paths = await openTree(root);
    const seen: string[] = [];
    const listener = (warning: Error): void => {
      seen.push(warning.message);
    };
    process.on("warning", listener);
    let run;
    try {
      run = await cli(["grants", "revoke", (sampleGrants()[0] as Grant).id, ...at()], { cwd: base });
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("warning", listener);
    }
    expect(run.code).toBe(EXIT.ok);
    expect(seen).toEqual([]);
    expect(run.stderr).toBe(
      [paths[1], paths[2]]
        .map(
          (path) =>
            `loopctl: warning: grant ledger path ${path} was open to group or others (mode 755); made owner-only (mode 700)\n`,
        )
        .join(""),
    );
    expect(await Promise.all(paths.map(modeOf))).toEqual([0o755, 0o700, 0o700, 0o600]);
  });
});

describe("a ledger lock held by a live process", () => {
  it("says it is waiting, with the holder's pid, then goes on when the lock is free", async () => {
    const [first] = sampleGrants() as [Grant];
    const store = await seed(root, project, [first]);
    const holder = spawn(process.execPath, ["-e", "setInterval(() => {}, 60_000)"], { stdio: "ignore" });
    await writeFile(
      store.lockPath,
      JSON.stringify({ pid: holder.pid, hostname: hostname(), createdAtMs: Date.now(), token: "t" }),
    );
    let stderr = "";
    const running = runCli(["grants", "revoke", first.id, ...at()], {
      stdout: { write: () => true },
      stderr: { write: (chunk: string) => (stderr += chunk) },
      env: {},
      cwd: base,
    });
    try {
      await expect.poll(() => stderr, { timeout: 10_000 }).toContain("waiting");
      expect(stderr).toBe(
        `loopctl: waiting for the grant ledger lock ${store.lockPath}, held by pid ${String(holder.pid)} on ${hostname()}\n`,
      );
    } finally {
      holder.kill("SIGKILL");
    }
    expect(await running).toBe(EXIT.ok);
    expect(await store.load()).toEqual([]);
  });
});

describe("command lines that say something other than they seem", () => {
  it("a value left out or one that looks like a flag is refused in one line naming the option", async () => {
    const cases: [string[], string][] = [
      [["grants", "list", "--project"], "loopctl grants list: --project needs a value\n"],
      [
        ["grants", "reset", "--tool", "--json"],
        "loopctl grants reset: --tool needs a value; to give one starting with a dash, write --tool=--json\n",
      ],
      [
        ["console", "--port", "-1"],
        "loopctl console: --port needs a value; to give one starting with a dash, write --port=-1\n",
      ],
      [
        ["audit", "verify", "log.jsonl", "--json=false"],
        'loopctl audit verify: --json takes no value, got "false": write --json, or leave it out\n',
      ],
      [
        ["grants", "list", "--help=1"],
        'loopctl grants list: --help takes no value, got "1": write --help, or leave it out\n',
      ],
      // Before any command word too, where the group reads its own options.
      [["--version=1"], 'loopctl: --version takes no value, got "1": write --version, or leave it out\n'],
      [["--help=yes"], 'loopctl: --help takes no value, got "yes": write --help, or leave it out\n'],
      [["grants", "--help="], 'loopctl grants: --help takes no value, got "": write --help, or leave it out\n'],
      [["--json=1", "--help"], 'loopctl: --json takes no value, got "1": write --json, or leave it out\n'],
    ];
    for (const [argv, line] of cases) {
      const run = await cli(argv, { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(run.stderr.split("\n")[0]).toBe(line.trimEnd());
      expect(run.stderr).not.toContain("\\u000a");
    }
  });

  it("a flag given twice means what it means once, as --help and --json always did: only a value can differ", async () => {
    await seed(root, project, sampleGrants());
    const once = await cli(["grants", "list", "--json", ...at()], { cwd: base });
    expect(once.code).toBe(EXIT.ok);
    expect(await cli(["grants", "list", "--json", "--json", ...at()], { cwd: base })).toEqual(once);
    const help = await cli(["grants", "list", "--help"], { cwd: base });
    expect(await cli(["grants", "list", "--help", "-h"], { cwd: base })).toEqual(help);
    for (const argv of [
      ["--version", "--version"],
      ["-v", "--version"],
      ["-v", "-v", "--json", "--json"],
    ]) {
      const run = await cli(argv, { cwd: base });
      expect(run, argv.join(" ")).toMatchObject({ code: EXIT.ok, stderr: "" });
      expect(run.stdout, argv.join(" ")).toMatch(/^(0\.1\.0\n|\{\n {2}"version": "0\.1\.0"\n\}\n)$/);
    }
  });

  it("an option given twice is refused, and nothing is reset", async () => {
    const grants = sampleGrants();
    const store = await seed(root, project, grants);
    const other = join(base, "other");
    await mkdir(other);
    const run = await cli(["grants", "reset", "--root", root, "--project", other, "--project", project], { cwd: base });
    expect(run).toMatchObject({ code: EXIT.usage, stdout: "" });
    expect(run.stderr).toContain("loopctl grants reset: --project given twice; give it once\n");
    expect(await store.load()).toHaveLength(grants.length);
    const hosts = await cli(["console", "--allowed-host", "a", "--allowed-host", "b", "--port", "x"], { cwd: base });
    expect(hosts.stderr).toContain("--port must be an integer");
  });

  it('an empty --project ("$UNSET") is refused instead of meaning the current folder', async () => {
    const grants = sampleGrants();
    const store = await seed(root, project, grants);
    for (const argv of [
      ["grants", "reset", "--root", root, "--project="],
      ["grants", "list", "--root", root, "--project", ""],
      ["grants", "repair", "--root", root, "--project="],
      ["console", "--root", root, "--project=", "--port", "0"],
    ]) {
      const run = await cli(argv, { cwd: project });
      expect(run, argv.join(" ")).toMatchObject({ code: EXIT.usage, stdout: "" });
      expect(run.stderr).toContain("--project needs a folder (DIR)");
    }
    expect(await store.load()).toHaveLength(grants.length);
    const audit = await cli(["console", "--audit=", "--root", root, "--port", "0"], { cwd: project });
    expect(audit).toMatchObject({ code: EXIT.usage, stdout: "" });
    expect(audit.stderr).toContain("--audit needs the FILE of an audit log");
  });

  it("an option written before its command is said to go after it, not called unknown", async () => {
    const store = await seed(root, project, sampleGrants());
    const cases: [string[], string][] = [
      [
        ["grants", "--project", project, "reset"],
        'loopctl grants: "--project" goes after the command: loopctl grants reset --project …',
      ],
      [
        ["grants", "--root=/x", "list"],
        'loopctl grants: "--root" goes after the command: loopctl grants list --root …',
      ],
      [["--json", "grants", "list"], 'loopctl: "--json" goes after the command: loopctl grants list --json …'],
      [["--json", "console"], 'loopctl: "--json" goes after the command: loopctl console --json …'],
      [["--json", "grants"], 'loopctl: "--json" goes after the command: loopctl grants --json …'],
      [
        ["audit", "--json", "verify", "x"],
        'loopctl audit: "--json" goes after the command: loopctl audit verify --json …',
      ],
      // No command after it: an option the group does not take, as before.
      [["grants", "--project", "list2"], 'loopctl grants: unknown option "--project"'],
      [["grants", "--", "list"], 'loopctl grants: unknown option "--"'],
    ];
    for (const [argv, line] of cases) {
      const run = await cli(argv, { cwd: base });
      expect(run.code, argv.join(" ")).toBe(EXIT.usage);
      expect(run.stderr.split("\n")[0], argv.join(" ")).toBe(line);
    }
    expect(await store.load()).toHaveLength(3);
  });

  it("an unknown option after a command group is named as an option", async () => {
    const run = await cli(["grants", "--hepl"], { cwd: base });
    expect(run.code).toBe(EXIT.usage);
    expect(run.stderr).toContain('loopctl grants: unknown option "--hepl"; did you mean --help?\n');
  });
});
