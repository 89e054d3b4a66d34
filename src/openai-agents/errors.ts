import { LoopctlError } from "../errors.js";
import { shownKey } from "../unknown-option.js";

/**
 * `AgentApprovals` cannot do what it was asked: an interruption for a tool it
 * did not wrap, or for a call that is not a function call (a hosted MCP
 * approval request, a shell or computer call: no loopctl decision can be made
 * for it), a call under a
 * call id another call of its run has, in the turn or in flight (the SDK
 * approves a run's calls by id, so they cannot be told apart), an approved call the run executed with
 * other arguments than the ones approved, an approved call the run never executed, an
 * interruption for an approved call (or one resumed with an earlier answer) that the resumed run did not
 * execute (the answer was lost), or a
 * tool whose `isEnabled` threw while `settle` looked for the tool an
 * interruption is for, or a
 * refused call of a tool whose output schema leaves no room for a refusal
 * text (handed to the tool's `errorFunction`, thrown when it has none). `code` is `"OPENAI_AGENTS_APPROVAL"`;
 * `tool` names the tool.
 */
export class AgentsApprovalError extends LoopctlError {
  /** The tool at fault. */
  readonly tool: string;

  constructor(tool: string, message: string, options?: ErrorOptions) {
    super("OPENAI_AGENTS_APPROVAL", `tool ${shownKey(tool)}: ${message}`, options);
    this.tool = tool;
  }
}

/**
 * `AgentApprovals` was given an option it cannot use, or a tool it cannot
 * wrap. `code` is `"OPENAI_AGENTS_CONFIG"`; `option` names it.
 */
export class AgentsConfigError extends LoopctlError {
  /** The option at fault. */
  readonly option: string;

  constructor(option: string, message: string, options?: ErrorOptions) {
    super("OPENAI_AGENTS_CONFIG", `${option}: ${message}`, options);
    this.option = option;
  }
}
