/**
 * Calls a gate once for a bare descriptor whose input schema holds a pattern
 * that a backtracking engine takes exponential time on, with arguments built
 * to trigger it, and prints the outcome's type and reason as one JSON line.
 * `node --import tsx test/support/pattern-child.ts <keyword>`: the pattern
 * sits in `pattern` or is a `patternProperties` key.
 */
import { Gate, LoopManagers } from "loopctl/engine";

const keyword = process.argv[2];
const evil = "^(a+)+$";
const inputSchema =
  keyword === "patternProperties"
    ? { type: "object", patternProperties: { [evil]: { type: "number" } }, additionalProperties: false }
    : { type: "object", properties: { name: { type: "string", pattern: evil } } };
const hostile = `${"a".repeat(40)}!`;
const input = keyword === "patternProperties" ? { [hostile]: 1 } : { name: hostile };

const gate = new Gate(new LoopManagers());
const outcome = await gate.call(
  { tool: { name: "lookup", description: "", inputSchema }, callId: "c1", input },
  () => "ran",
);
process.stdout.write(`${JSON.stringify({ type: outcome.type, reason: outcome.record.reason })}\n`);
