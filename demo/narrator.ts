import type { GateEvent, Observer } from "loopctl/engine";
import { printable } from "../src/cli/format.js";
import { verdictStyle } from "./audit-table.js";
import { clip } from "./layout.js";
import type { Output } from "./output.js";
import type { Style } from "./style.js";

/** `value` on one line: a string as it is, anything else as JSON; blanks collapsed. */
function oneLine(value: unknown): string {
  return printable((typeof value === "string" ? value : (JSON.stringify(value) ?? String(value))).replace(/\s+/g, " "));
}

/**
 * Tells what the agent does as it happens, from the engine's own events:
 * what the model says, each call, the gate's record and the result. Every
 * event also lands in `gates`, for the audit trail at the end.
 */
export function narrator(out: Output, style: Style, gates: GateEvent[]): Observer {
  return {
    onModelResponse({ response }) {
      if (response.text !== undefined && response.text !== "") {
        out.write("\n");
        out.line(printable(response.text), `${style.cyan("assistant>")} `);
      }
    },
    onToolPre({ turn, call }) {
      const lead = `  [turn ${turn}] ${printable(call.name)} `;
      out.line(
        `${style.dim(`[turn ${turn}]`)} ${style.bold(printable(call.name))} ${clip(oneLine(call.input), out.width - lead.length)}`,
        "  ",
      );
    },
    onGate(event) {
      gates.push(event);
      const d = event.decision;
      const why =
        d.ruleId === "grant"
          ? `decided by a remembered grant ${d.matchedPattern ?? ""}, no ask`
          : [`${d.ruleId}/${d.ruleSource}`, d.reason].filter((x) => x !== null).join(": ");
      out.line(`${verdictStyle(d.verdict, style)(d.verdict)}  ${printable(why)}`, `    ${style.dim("gate")}    `);
    },
    onToolPost({ outcome }) {
      const lead = "    result  ";
      const text = clip(oneLine(outcome.type === "ran" ? outcome.output : outcome.message), out.width - lead.length);
      out.line(outcome.type === "ran" ? text : style.red(text), `    ${style.dim("result")}  `);
    },
    onGrantError({ error }) {
      out.line(
        `${style.red("could not remember the answer:")} ${printable(error instanceof Error ? error.message : String(error))}`,
        "    ",
      );
    },
  };
}
