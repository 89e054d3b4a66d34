// A fixed approval policy: read-only tools pass, writes under ./tmp pass with
// a note, everything else is denied. Run: npx tsx examples/sync-resolver.ts
import { NIL_UUID, SyncAskResolver } from "loopctl/ask";
import type { AskResolution, PendingAsk } from "loopctl/ask";

const READ_ONLY = new Set(["read_file", "list_dir", "grep"]);

const policy = new SyncAskResolver((ask): boolean | AskResolution => {
  if (READ_ONLY.has(ask.tool)) return true;
  if (ask.tool === "write_file" && ask.prompt.includes("./tmp/")) {
    return { type: "approve", remember: "this_call" };
  }
  return { type: "deny", reason: `${ask.tool} needs a human` };
});

const session = "0f8fad5b-d9cb-469f-a165-70867728950e";
const asks: PendingAsk[] = [
  ["read_file", "Read ./README.md?"],
  ["write_file", "Write ./tmp/notes.txt?"],
  ["shell", "Run `rm -rf build`?"],
].map(([tool, prompt], turn) => ({
  id: `5c1f0a0e-3c4b-4f7e-9a1d-00000000000${turn}`,
  sessionId: session,
  runId: NIL_UUID,
  turn,
  callId: `call_${turn}`,
  tool: tool ?? "",
  argsDigest: "9f86d081884c7d65",
  prompt: prompt ?? "",
}));

// The engine passes a signal that aborts at its deadline or on cancel.
const controller = new AbortController();
for (const ask of asks) {
  const resolution = await policy.resolve(ask, { signal: controller.signal });
  const detail = resolution.type === "deny" ? ` (${resolution.reason ?? "no reason"})` : "";
  console.log(`${ask.tool}: ${resolution.type}${detail}`);
}
