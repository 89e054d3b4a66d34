/** Argument objects shaped like real tool calls, built deterministically; one parked ask. */
import type { PendingAsk } from "../../src/ask/index.js";
import type { ToolDescriptor } from "../../src/grant/index.js";

/** The tool the grant-decision benchmarks decide calls of. */
export const WRITE_FILE: ToolDescriptor = {
  name: "write_file",
  description: "Write a file in the project",
  inputSchema: {
    type: "object",
    properties: { path: { type: "string" }, mode: { type: "string", enum: ["overwrite", "append"] } },
    required: ["path"],
  },
};

/** The ask the park benchmarks hand through the channel. */
export const BENCH_ASK: PendingAsk = {
  id: "00000000-0000-4000-8000-000000000001",
  sessionId: "11111111-1111-4111-8111-111111111111",
  runId: "22222222-2222-4222-8222-222222222222",
  turn: 0,
  callId: "call_1",
  tool: "write_file",
  argsDigest: "f1ed61cd8ca5e26b",
  prompt: "Write the release notes?",
};

/**
 * `BENCH_ASK` under ids of its own, to be taken in turn: a channel refuses an
 * id among the last 256 that ended on it, so a round trip per ask needs more
 * ids than that. Built once, so no round trip pays for making its id.
 */
export const BENCH_ASKS: readonly PendingAsk[] = Array.from({ length: 1024 }, (_, n) => ({
  ...BENCH_ASK,
  id: `00000000-0000-4000-8000-${(n + 1).toString(16).padStart(12, "0")}`,
}));

/** About 200 bytes of JSON: a file write with a few options. */
export function smallArgs(): Record<string, unknown> {
  return {
    path: "/home/dev/project/docs/release-notes.md",
    mode: "overwrite",
    content: "## 0.1.0\n- first release: park, approve, remember",
    options: { encoding: "utf8", createDirs: true, fileMode: 420 },
    tags: ["release", "docs"],
    limit: 10,
  };
}

/**
 * About 1 MB of JSON: a batch edit with many files, nested objects, numbers
 * and escaped strings, keys deliberately out of sorted order.
 */
export function largeArgs(targetBytes = 1_000_000): Record<string, unknown> {
  const files: Record<string, unknown>[] = [];
  let bytes = 0;
  for (let i = 0; bytes < targetBytes; i++) {
    const file = {
      path: `/home/dev/project/src/module-${i}/index.ts`,
      size: 1000 + i,
      content: `export const value${i} = "line with \\"quotes\\" and a tab\\t";\n`.repeat(2),
      meta: { zeta: i % 7, alpha: i % 3 === 0, mid: [i, i * 2, `${i}`], owner: { uid: 1000, name: "dev" } },
      checksum: (i * 2654435761).toString(16),
    };
    bytes += JSON.stringify(file).length + 1;
    files.push(file);
  }
  return { root: "/home/dev/project", files, dryRun: false, reason: "batch reformat" };
}

/** A string of exactly `bytes` UTF-8 bytes, mostly ASCII with some multi-byte characters. */
export function textOfBytes(bytes: number): string {
  const unit = "loopctl digest payload — é ü ✓ 0123456789 abcdefghijklmnopqrstuvwxyz\n";
  const unitBytes = Buffer.byteLength(unit);
  let s = unit.repeat(Math.floor(bytes / unitBytes));
  s += "x".repeat(bytes - Buffer.byteLength(s));
  return s;
}
