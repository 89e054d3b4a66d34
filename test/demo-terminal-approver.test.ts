import { PassThrough } from "node:stream";
import { describe, expect, it } from "vitest";
import { APPROVER_CLOSED_REASON, ApprovalChannel, NIL_UUID } from "../src/ask/index.js";
import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import { argsDigest } from "../src/grant/index.js";
import { wantsColor } from "../demo/style.js";
import {
  describeAsk,
  describeChoice,
  parseChoice,
  resolutionFor,
  runTerminalApprover,
} from "../demo/terminal-approver.js";
import { makeStyle } from "../demo/style.js";

function pendingAsk(n: number, tool = "deploy"): PendingAsk {
  return {
    id: `00000000-0000-4000-8000-${String(n).padStart(12, "0")}`,
    sessionId: "11111111-1111-4111-8111-111111111111",
    runId: NIL_UUID,
    turn: 2,
    callId: `call_${n}`,
    tool,
    argsDigest: argsDigest({ env: "staging", n }),
    prompt: `Deploy 1.4.0 to staging (#${n})?`,
  };
}

/** Collects everything written to `stream` as text. */
function capture(stream: PassThrough): () => string {
  const chunks: string[] = [];
  stream.on("data", (chunk: Buffer) => chunks.push(chunk.toString("utf8")));
  return () => chunks.join("");
}

/** Resolves once `read()` contains `text`; the output is written synchronously, so microtask turns suffice. */
async function waitFor(read: () => string, text: string): Promise<void> {
  for (let i = 0; i < 1000 && !read().includes(text); i += 1) await new Promise((r) => setImmediate(r));
  expect(read()).toContain(text);
}

describe("demo terminal approver", () => {
  it("shows the ask and what each answer does, within 80 columns", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const input = new PassThrough();
    const output = new PassThrough();
    const read = capture(output);
    const done = runTerminalApprover(approver, {
      input,
      output,
      describeTool: (tool) => ({ name: tool, description: "Deploys a release", inputSchema: { type: "object" } }),
    });
    const ask = pendingAsk(1);
    const answer = channel.resolve(ask, { signal: new AbortController().signal });
    await waitFor(read, "your answer");
    const shown = read();
    expect(shown).toContain("? approval needed: deploy (turn 2, call call_1)");
    expect(shown).toContain("  Deploy 1.4.0 to staging (#1)?");
    expect(shown).toContain(`  args ${ask.argsDigest}, ask ${ask.id}`);
    expect(shown).toContain("  y            approve once\n");
    expect(shown).toContain("  n            deny once\n");
    expect(shown).toContain("  always-call  approve; remember for these exact arguments\n");
    expect(shown).toContain("  always-tool  approve; remember for deploy, any arguments\n");
    expect(shown).toContain("  never-call   deny; remember for these exact arguments\n");
    expect(shown).toContain("  never-tool   deny; remember for deploy, any arguments\n");
    expect(shown.replace(/\s+/g, " ")).toMatch(
      /pinned to sha256:[0-9a-f]{12}…: if the tool changes, it is asked about again/,
    );
    expect(shown).toContain("your answer [y/n/always-call/always-tool/never-call/never-tool]: ");
    expect(shown).not.toContain("\u001b[");
    for (const line of shown.split("\n")) expect(line.length, line).toBeLessThanOrEqual(80);
    input.write("always-tool\n");
    await expect(answer).resolves.toEqual({ type: "approve", remember: "this_tool" });
    approver.close();
    await expect(done).resolves.toEqual({ answered: 1, late: 0 });
    expect(read()).toContain("always-tool: approve; remember for deploy, any arguments");
  });

  it("fits a long tool name, prompt and ask into the width it is given", () => {
    const ask = { ...pendingAsk(11, "x".repeat(70)), prompt: `Deploy ${"word ".repeat(40)}and ${"y".repeat(120)}?` };
    for (const width of [40, 60, 80]) {
      const text = describeAsk(ask, makeStyle(false), { name: ask.tool, description: "d", inputSchema: {} }, width);
      for (const line of text.split("\n")) expect(line.length, line).toBeLessThanOrEqual(width);
      expect(text.replace(/\s/g, "")).toContain(`and${"y".repeat(120)}?`);
    }
  });

  it.each([
    ["y", { type: "approve" }],
    ["yes", { type: "approve" }],
    ["n", { type: "deny", reason: "denied at the terminal" }],
    ["no", { type: "deny", reason: "denied at the terminal" }],
    ["always-call", { type: "approve", remember: "this_call" }],
    ["always-tool", { type: "approve", remember: "this_tool" }],
    ["never-call", { type: "deny", reason: "denied at the terminal", remember: "this_call" }],
    ["never-tool", { type: "deny", reason: "denied at the terminal", remember: "this_tool" }],
  ] as Array<[string, AskResolution]>)("answers %s with %j", async (key, expected) => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const input = new PassThrough();
    const done = runTerminalApprover(approver, { input, output: new PassThrough() });
    const answer = channel.resolve(pendingAsk(2), { signal: new AbortController().signal });
    input.write(`${key}\n`);
    await expect(answer).resolves.toEqual(expected);
    approver.close();
    await done;
  });

  it.each(["maybe", "a", "c", "t", "d", "always", "never", "always-", "alwaystool", "yy", "n!"])(
    "takes %j for no answer and asks again: nothing is remembered by a slip",
    async (typo) => {
      const [channel, approver] = ApprovalChannel.pair(1);
      const input = new PassThrough();
      const output = new PassThrough();
      const read = capture(output);
      const done = runTerminalApprover(approver, { input, output });
      const answer = channel.resolve(pendingAsk(12), { signal: new AbortController().signal });
      input.write(`${typo}\n`);
      await waitFor(read, `not an answer: ${JSON.stringify(typo)}`);
      input.write("n\n");
      await expect(answer).resolves.toEqual({ type: "deny", reason: "denied at the terminal" });
      approver.close();
      await done;
    },
  );

  it("answers asks in park order, one at a time", async () => {
    const [channel, approver] = ApprovalChannel.pair(4);
    const input = new PassThrough();
    const done = runTerminalApprover(approver, { input, output: new PassThrough() });
    const signal = new AbortController().signal;
    const first = channel.resolve(pendingAsk(4), { signal });
    const second = channel.resolve(pendingAsk(5), { signal });
    input.write("n\ny\n");
    await expect(first).resolves.toMatchObject({ type: "deny" });
    await expect(second).resolves.toEqual({ type: "approve" });
    approver.close();
    await expect(done).resolves.toEqual({ answered: 2, late: 0 });
  });

  it("fails closed when the input ends: the ask and every later one are denied", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const input = new PassThrough();
    const output = new PassThrough();
    const read = capture(output);
    const done = runTerminalApprover(approver, { input, output });
    const answer = channel.resolve(pendingAsk(6), { signal: new AbortController().signal });
    input.end();
    await expect(answer).resolves.toEqual({ type: "deny", reason: APPROVER_CLOSED_REASON });
    await expect(done).resolves.toEqual({ answered: 0, late: 0 });
    expect(read()).toContain("input ended");
    await expect(channel.resolve(pendingAsk(7), { signal: new AbortController().signal })).resolves.toEqual({
      type: "deny",
      reason: APPROVER_CLOSED_REASON,
    });
  });

  it("says so when the answer comes after the ask stopped waiting", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const input = new PassThrough();
    const output = new PassThrough();
    const read = capture(output);
    const done = runTerminalApprover(approver, { input, output });
    const deadline = new AbortController();
    const answer = channel.resolve(pendingAsk(8), { signal: deadline.signal });
    await waitFor(read, "your answer");
    deadline.abort(new Error("deadline"));
    await expect(answer).rejects.toThrow("deadline");
    input.write("y\n");
    await waitFor(read, "too late");
    approver.close();
    await expect(done).resolves.toEqual({ answered: 0, late: 1 });
  });

  it("stops on its signal while a prompt waits: the ask is denied and nothing keeps reading", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const input = new PassThrough();
    const output = new PassThrough();
    const read = capture(output);
    const stop = new AbortController();
    const done = runTerminalApprover(approver, { input, output, signal: stop.signal });
    const answer = channel.resolve(pendingAsk(10), { signal: new AbortController().signal });
    await waitFor(read, "your answer");
    stop.abort();
    await expect(answer).resolves.toEqual({ type: "deny", reason: APPROVER_CLOSED_REASON });
    await expect(done).resolves.toEqual({ answered: 0, late: 0 });
    expect(read()).not.toContain("input ended");
    expect(input.listenerCount("data")).toBe(0);
  });

  it("colours only when asked to", async () => {
    const [channel, approver] = ApprovalChannel.pair(1);
    const input = new PassThrough();
    const output = new PassThrough();
    const read = capture(output);
    const done = runTerminalApprover(approver, { input, output, color: true });
    const answer = channel.resolve(pendingAsk(9), { signal: new AbortController().signal });
    await waitFor(read, "your answer");
    expect(read()).toContain("\u001b[");
    input.write("y\n");
    await answer;
    approver.close();
    await done;
  });

  it("parses case and blanks loosely but never guesses", () => {
    expect(parseChoice(" Y ")).toBe("y");
    expect(parseChoice("NO")).toBe("n");
    expect(parseChoice("Always-Tool")).toBe("always-tool");
    expect(parseChoice("never  call")).toBe("never-call");
    expect(parseChoice("")).toBeUndefined();
    expect(parseChoice("sure, why not")).toBeUndefined();
    expect(parseChoice("always deny")).toBeUndefined();
  });

  it("spells out what a remembering answer does, for the scripted approver too", () => {
    expect(describeChoice("y", "deploy")).toBe("approve once");
    expect(describeChoice("never-tool", "deploy")).toBe("never-tool: deny; remember for deploy, any arguments");
    expect(resolutionFor("n", "not now")).toEqual({ type: "deny", reason: "not now" });
  });

  it("wants colour only on a TTY, and never with NO_COLOR set", () => {
    expect(wantsColor({ isTTY: true }, {})).toBe(true);
    expect(wantsColor({ isTTY: true }, { NO_COLOR: "1" })).toBe(false);
    expect(wantsColor({ isTTY: true }, { NO_COLOR: "" })).toBe(true);
    expect(wantsColor({ isTTY: false }, {})).toBe(false);
    expect(wantsColor({}, {})).toBe(false);
  });
});

describe("what the terminal approver shows", () => {
  const hostile: PendingAsk = {
    id: "9b2f6c1e-4a7d-4e2b-9c3a-1f2e3d4c5b6a",
    sessionId: NIL_UUID,
    runId: NIL_UUID,
    turn: 0,
    callId: "c1\u001b]0;title\u0007",
    tool: "deploy\u202e",
    argsDigest: argsDigest({ env: "prod" }),
    prompt: "Deploy to \u001b[2K\rstaging?\nsecond line",
  };

  it("never passes escape sequences or direction overrides from an ask to the terminal", () => {
    const text = describeAsk(hostile, makeStyle(false));
    expect(text).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f\u202e]/);
    expect(text).toContain("Deploy to \\u001b[2K\\u000dstaging?");
    expect(text).toContain("deploy\\u202e");
  });

  it("shows invisible characters in a tool name or prompt as escapes, so a look-alike never passes for the real name", () => {
    const text = describeAsk(
      { ...hostile, tool: "dep\u200bloy\u2060", prompt: "Deploy\ufeff \u00adnow\u061c?" },
      makeStyle(false),
    );
    expect(text).toContain("dep\\u200bloy\\u2060");
    expect(text).toContain("Deploy\\ufeff \\u00adnow\\u061c?");
    expect(text).not.toMatch(/[\u200b\u2060\ufeff\u00ad\u061c]/);
  });

  it("keeps a multi-line prompt on indented lines", () => {
    expect(describeAsk(hostile, makeStyle(false))).toContain("staging?\n  second line");
  });
});
