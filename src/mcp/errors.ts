import { LoopctlError } from "../errors.js";
import { shownKey } from "../unknown-option.js";

/**
 * A server's name as errors quote it: as {@link shownKey} does, in JSON's escapes unless it is plain
 * printable ASCII without a quote; a name cut to its head keeps its `…` inside the quotes.
 */
function shownServer(server: string): string {
  const head = server.endsWith("\u2026") ? server.slice(0, -1) : server;
  const shown = shownKey(head);
  return head === server ? shown : `${shown.slice(0, -1)}\u2026${shown.slice(-1)}`;
}

/**
 * An MCP server could not be read: listing its tools failed, it answered
 * with something that is not a tool list, its pages never end (or its
 * last page does not come within the toolset's `timeoutMs`), it lists
 * more than 10,000 tools, or the client is no longer connected over the
 * transport the toolset follows. `code` is `"MCP_SERVER"`; `server` names it.
 */
export class McpServerError extends LoopctlError {
  /** The server at fault (its name from the handshake, or the `server` option). */
  readonly server: string;

  constructor(server: string, message: string, options?: ErrorOptions) {
    super("MCP_SERVER", `MCP server ${shownServer(server)}: ${message}`, options);
    this.server = server;
  }
}

/**
 * A call to an MCP tool did not produce a result: the server answered with
 * `isError` or with a JSON-RPC error, or with a result that does not match
 * the tool's output schema or gives the model more than `maxResultBytes` (or
 * whose text cannot be made: structured content nested too deep, or the
 * toolset's `result` option threw; the thrown value is the `cause`), or
 * `tools/call` got no answer (a
 * timeout, a closed connection, a protocol error; the MCP SDK's error is the
 * `cause`), the server's tools could not be listed when the call was to be
 * sent (the `McpServerError` is the `cause`), the tool changed on the server
 * (`changed`) while the call was on its way, so what was approved is not what
 * would run, or the server stopped offering it (`changed` too), or the
 * toolset was closed or its client is no longer connected over the transport
 * the tool was listed from. The model reads the message.
 * `code` is `"MCP_TOOL"`.
 */
export class McpToolError extends LoopctlError {
  /** The server the tool lives on. */
  readonly server: string;
  /** The tool, as loopctl names it (with the prefix). */
  readonly tool: string;
  /** True when the call was stopped because the tool changed on the server, or the server stopped offering it. */
  readonly changed: boolean;

  constructor(server: string, tool: string, message: string, changed = false, options?: ErrorOptions) {
    super("MCP_TOOL", `tool ${shownKey(tool)} on MCP server ${shownServer(server)}: ${message}`, options);
    this.server = server;
    this.tool = tool;
    this.changed = changed;
  }
}

/**
 * A toolset's `onChange` threw, or returned a promise that rejected. The
 * toolset is current all the same (what a callback does cannot change what
 * it offers); what the callback was to do with the new tools may not have
 * happened. Handed to `onError` (without one, emitted as a process warning),
 * never thrown. `code` is `"MCP_CALLBACK"`; `cause` is what the callback threw.
 */
export class McpCallbackError extends LoopctlError {
  /** The server whose toolset called the callback. */
  readonly server: string;
  /** The option at fault (`"onChange"`). */
  readonly option: string;

  constructor(server: string, option: string, message: string, options?: ErrorOptions) {
    super("MCP_CALLBACK", `${option} of the toolset of MCP server ${shownServer(server)} failed: ${message}`, options);
    this.server = server;
    this.option = option;
  }
}

/**
 * `mcpTools`, `mcpAnnotationHook` or a toolset's `refresh()` was given
 * something it cannot use: a client that is not connected, a prefix or option
 * of the wrong kind, an option it does not know. `code` is `"MCP_CONFIG"`; the message names the option.
 */
export class McpConfigError extends LoopctlError {
  /** The option at fault. */
  readonly option: string;

  constructor(option: string, message: string, options?: ErrorOptions) {
    super("MCP_CONFIG", `${option}: ${message}`, options);
    this.option = option;
  }
}
