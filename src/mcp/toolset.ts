import { setMaxListeners } from "node:events";
import { everyKey, shownKey } from "../unknown-option.js";
import type { Client } from "@modelcontextprotocol/sdk/client/index.js";
import type { Transport } from "@modelcontextprotocol/sdk/shared/transport.js";
import type { CallToolResult, Tool as McpTool } from "@modelcontextprotocol/sdk/types.js";
import { defineTool } from "../engine/index.js";
import type { Tool, ToolContext, ToolDescriptor, ToolSource } from "../engine/index.js";
import { abortReason, isAbortSignal, unlisten } from "../abort-signal.js";
import { printable } from "../cli/format.js";
import { ToolDefinitionError, describeError } from "../engine/errors.js";
import { withdrawnWith } from "../engine/gate.js";
import { recordText } from "../engine/records-slot.js";
import { compileJsonSchema } from "../engine/validation.js";
import type { Validator } from "../engine/validation.js";
import { descriptorFingerprint } from "../grant/index.js";
import { textHead } from "../text-head.js";
import { markChanged } from "./changed.js";
import { McpCallbackError, McpConfigError, McpServerError, McpToolError } from "./errors.js";
import { refuseUnknown } from "./options.js";
import { resultText } from "./result.js";
import { shownText } from "../shown.js";

/** What `mcpTools` needs of an MCP SDK `Client` (connected). */
export type McpClient = Pick<Client, "listTools" | "callTool" | "getServerVersion" | "transport">;

/** Options of {@link mcpTools}. */
export interface McpToolsOptions {
  /** Put in front of every tool's name (`"fs_"` makes `read_file` `fs_read_file`); the server is called by its own name. @default "" */
  readonly prefix?: string;
  /** The server's name in errors. @default the name it gave in the handshake (its first 200 UTF-16 units, then `…`) */
  readonly server?: string;
  /**
   * Called with the new tools after a `list_changed` (or `refresh()`) changed them, outside the
   * listing. What it throws, or a promise it returns rejects with, goes to `onError` as
   * `McpCallbackError` (without one, to a process warning); the toolset keeps the new tools
   * either way.
   */
  readonly onChange?: (tools: readonly Tool[]) => void;
  /**
   * Called with `McpServerError` when a refresh failed (the toolset then has no tools until one
   * succeeds: fail closed), and with `McpCallbackError` when `onChange` threw. What it throws,
   * or a promise it returns rejects with, is dropped.
   * @default emits a process warning (`name` "LoopctlWarning", `code` "LOOPCTL_MCP") with the error's message,
   * control and invisible characters escaped, except for a failed listing a `refresh()` was waiting for: that call
   * rejects with it, and no warning repeats it; failed listings warn once until a listing works again
   */
  readonly onError?: (error: McpServerError | McpCallbackError) => void;
  /**
   * Turns a tool's successful result into what the model reads. What it throws, or a promise it
   * returns rejects with, fails the call with `McpToolError` (the call ran on the server; the
   * thrown value is its `cause`). @default its content blocks as text
   */
  readonly result?: (result: CallToolResult, tool: string) => unknown;
  /**
   * The most a call's result may give the model, in bytes of UTF-8: of the text the model reads
   * (the content blocks as text, or what `result` returns or its promise resolves to, a value
   * other than a string as JSON).
   * A result that gives more is a failed call (`McpToolError`), its text not passed on.
   * @default 1048576 (1 MiB)
   */
  readonly maxResultBytes?: number;
  /**
   * The time limit of each `tools/call` request, and of each listing (every page of `tools/list`
   * together), in ms (at most 2^31 - 1). @default 60 s (the MCP SDK's for a request)
   */
  readonly timeoutMs?: number;
  /**
   * Stops the making of the toolset: aborted before `mcpTools` resolves, the first listing is
   * cancelled on the server, nothing is left following the client, and `mcpTools` rejects with
   * the signal's reason. Once the toolset is made it has no effect: `close()` the toolset.
   */
  readonly signal?: AbortSignal;
}

/** Options of {@link McpToolset.refresh}. */
export interface McpRefreshOptions {
  /**
   * Stops the wait: `refresh()` rejects with the signal's reason at once. The listing is the
   * toolset's (a `list_changed`, another `refresh()` may wait for it too), and goes on.
   */
  readonly signal?: AbortSignal;
}

/** A tool the server lists that loopctl cannot offer (its name or schema is unusable), and why. */
export interface McpToolProblem {
  readonly tool: string;
  readonly error: unknown;
}

/** The options of {@link mcpTools}: any other is refused, never ignored. */
const OPTIONS = everyKey<McpToolsOptions>()([
  "prefix",
  "server",
  "onChange",
  "onError",
  "result",
  "maxResultBytes",
  "timeoutMs",
  "signal",
]);

/** The options of {@link McpToolset.refresh}. */
const REFRESH_OPTIONS = everyKey<McpRefreshOptions>()(["signal"]);

/** The MCP SDK's `ErrorCode.RequestTimeout`, which it rejects a request with when its time limit passes. */
const REQUEST_TIMEOUT = -32001;

/** The MCP SDK's default time limit of a request (`DEFAULT_REQUEST_TIMEOUT_MSEC`), which loopctl passes itself. */
const DEFAULT_TIMEOUT_MS = 60_000;

/** The longest a timer waits (2^31 - 1 ms); the MCP SDK times requests with one. */
const MAX_TIMEOUT_MS = 2_147_483_647;

/**
 * Whether `error` is the MCP SDK's own timeout of a request given `limit` ms, once loopctl's
 * timer of that length, set just before the request, has fired (`expired`). The SDK rejects with
 * `McpError(RequestTimeout, "Request timed out", { timeout })`; a server's JSON-RPC error reply
 * becomes an `McpError` of whatever code, message and data the server chose, -32001 and
 * `{ timeout }` included, so the code or shape alone cannot tell them apart. The time can: the
 * SDK arms its timer of the same length right after loopctl's, and timers of one length fire in
 * the order they were set, so the SDK's cannot have fired while loopctl's had not.
 */
function isSdkTimeout(error: unknown, limit: number, expired: boolean): boolean {
  if (!expired || typeof error !== "object" || error === null) return false;
  const { code, data } = error as { code?: unknown; data?: unknown };
  return code === REQUEST_TIMEOUT && (data as { timeout?: unknown } | undefined)?.timeout === limit;
}

/** The default `maxResultBytes`: 1 MiB of text, some 250,000 tokens, more than most models can read in one turn. */
const DEFAULT_MAX_RESULT_BYTES = 1_048_576;

/**
 * The UTF-8 bytes of the text the model reads of `output` (what the engine gives it: a string as
 * is, anything else as JSON), or undefined when it has no such text (the engine refuses it then).
 */
function outputBytes(output: unknown): number | undefined {
  if (typeof output === "string") return Buffer.byteLength(output, "utf8");
  if (output === undefined) return 0;
  let text: unknown;
  try {
    text = JSON.stringify(output);
  } catch {
    return undefined;
  }
  return typeof text === "string" ? Buffer.byteLength(text, "utf8") : undefined;
}

/**
 * The text the model reads of `result`, or what stopped it being made: structured content is
 * written as JSON, and a server can send a value nested deeper than `JSON.stringify` goes.
 */
function readResult(
  result: CallToolResult,
): { readonly ok: true; readonly text: string } | { readonly ok: false; readonly error: unknown } {
  try {
    return { ok: true, text: resultText(result) };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * What a request that failed says, cut as a record cuts a text: the server chooses an error
 * reply's message, of any length, and it reaches the model (and `onError`) in the error's.
 */
function told(error: unknown): string {
  return recordText(describeError(error));
}

/** The most UTF-16 units of a name or cursor the server chose that an error quotes. */
const MAX_QUOTED = 200;

/** `text` whole up to {@link MAX_QUOTED} units, else its head (never half a surrogate pair) and `…`. */
function headOf(text: string): string {
  return text.length <= MAX_QUOTED ? text : `${textHead(text, MAX_QUOTED)}…`;
}

/**
 * A server's name from the handshake, as errors quote it: the server chooses it, of any length,
 * and every error of its toolset (each failed call the model reads) begins with it.
 */
function handshakeName(name: string | undefined): string | undefined {
  return typeof name === "string" ? headOf(name) : name;
}

/** A cursor the server gave, quoted for an error: a long one by its head and its length. */
function quotedCursor(cursor: string): string {
  const quoted = shownText(headOf(cursor));
  return cursor.length <= MAX_QUOTED ? quoted : `${quoted} (${cursor.length} characters)`;
}

/** Pages of `tools/list` read before the server is judged to be looping. */
const MAX_PAGES = 1000;

/**
 * Tools a listing may give, over all its pages: far more than a model can be
 * offered, and few enough that making them a toolset's tools (each schema
 * compiled) holds the process up for seconds, not minutes.
 */
const MAX_TOOLS = 10_000;

const LIST_CHANGED = "notifications/tools/list_changed";

/** The longest tool name the engine takes, in characters (code points). */
const MAX_NAME_LENGTH = 128;

/** A prefix that leaves room for a name of one character, and that no tool name could be made with. */
const PREFIX = /^[^\s\p{Cc}]{0,127}$/u;

const NONE: readonly Tool[] = Object.freeze([]);

function descriptorOf(name: string, tool: McpTool): ToolDescriptor {
  const annotationTitle = (tool.annotations as { title?: unknown } | undefined)?.title;
  const title = tool.title ?? (typeof annotationTitle === "string" ? annotationTitle : undefined);
  const descriptor: { -readonly [K in keyof ToolDescriptor]: ToolDescriptor[K] } = {
    name,
    description: tool.description ?? "",
    inputSchema: tool.inputSchema,
  };
  if (title !== undefined) descriptor.title = title;
  if (tool.annotations !== undefined) descriptor.annotations = tool.annotations;
  if (tool.outputSchema !== undefined) descriptor.outputSchema = tool.outputSchema;
  return descriptor;
}

/**
 * Whether the server lists `tool` as callable only as a task (`execution.taskSupport: "required"`),
 * which `tools/call` without a task cannot run: the MCP SDK client's `callTool` refuses it.
 */
function requiresTask(tool: McpTool): boolean {
  return (tool.execution as { taskSupport?: unknown } | undefined)?.taskSupport === "required";
}

/**
 * Hands every tool of a listing read over several pages to the MCP SDK
 * client's cache of what `tools/list` said, which each `listTools` call
 * replaces with its own page's tools. The client refuses to call a tool that
 * requires a task, and checks results against output schemas, by that cache;
 * loopctl checks results itself (see `#define`), so this only keeps the
 * client's own checks consistent over pages. The cache has no public setter
 * in `@modelcontextprotocol/sdk` 1.x; a client without it is left as it is.
 */
function cacheListed(client: McpClient, tools: readonly McpTool[]): void {
  const cache: unknown = (client as { cacheToolMetadata?: unknown }).cacheToolMetadata;
  if (typeof cache === "function") cache.call(client, tools);
}

/**
 * What a wait on `signal` rejects with once it aborted: its reason, or, when that cannot be read
 * (a getter that throws), an `McpConfigError` naming the signal, so the wait still settles.
 */
function reasonOf(signal: AbortSignal): unknown {
  return abortReason(
    signal,
    (cause) => new McpConfigError("signal", "aborted, and its reason could not be read", { cause }),
  );
}

/** Waits for `work` unless `signal` aborts first (then rejects with its reason); leaves no listener behind. */
async function unlessAborted<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) throw reasonOf(signal);
  let onAbort!: () => void;
  const abort = new Promise<never>((_, reject) => {
    onAbort = () => reject(reasonOf(signal));
    signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    return await Promise.race([work, abort]);
  } finally {
    unlisten(signal, onAbort);
  }
}

/** `signal` as an option takes it: undefined, or an AbortSignal (else an `McpConfigError` naming it). */
function checkedSignal(signal: unknown): AbortSignal | undefined {
  if (signal !== undefined && !isAbortSignal(signal))
    throw new McpConfigError("signal", "must be an AbortSignal or undefined");
  return signal;
}

/** What a toolset hears of its transport: each `list_changed`, and the connection's end. */
interface Follower {
  changed(): void;
  closed(): void;
}

/** The handlers of ours on a transport, and the toolsets they tell. */
interface Followers {
  readonly onmessage: NonNullable<Transport["onmessage"]>;
  readonly onclose: NonNullable<Transport["onclose"]>;
  readonly previous: Pick<Transport, "onmessage" | "onclose">;
  readonly listeners: Set<Follower>;
}

/**
 * The toolsets following each transport. One handler serves them all: a
 * handler for each toolset could only be taken off while nothing was set
 * over it, so toolsets closed out of the order they were made in would pile
 * up on the transport, each message passing through every one, each keeping
 * its closed toolset.
 */
const following = new WeakMap<Transport, Followers>();

/**
 * Tells `listener` of each `list_changed` the transport brings, and of the
 * end of its connection, until the returned function is called. The client
 * owns the transport's handlers and may replace its own notification handlers
 * at will; wrapping the transport's composes with both, as the client itself
 * composes with handlers set before it.
 */
function followTransport(transport: Transport, listener: Follower): () => void {
  let followers = following.get(transport);
  if (followers === undefined) {
    const previous = { onmessage: transport.onmessage, onclose: transport.onclose };
    const listeners = new Set<Follower>();
    const onmessage: NonNullable<Transport["onmessage"]> = (message, extra) => {
      try {
        previous.onmessage?.(message, extra);
      } finally {
        if ("method" in message && message.method === LIST_CHANGED && !("id" in message))
          for (const follower of [...listeners]) follower.changed();
      }
    };
    const onclose = (): void => {
      try {
        previous.onclose?.();
      } finally {
        for (const follower of [...listeners]) follower.closed();
      }
    };
    followers = { onmessage, onclose, previous, listeners };
    following.set(transport, followers);
    transport.onmessage = onmessage;
    transport.onclose = onclose;
  }
  const ours = followers;
  ours.listeners.add(listener);
  return () => {
    ours.listeners.delete(listener);
    if (ours.listeners.size > 0 || following.get(transport) !== ours) return;
    // The last to leave puts back what was there, unless something was set over ours since.
    let restored = true;
    if (transport.onmessage === ours.onmessage) transport.onmessage = ours.previous.onmessage;
    else restored = false;
    if (transport.onclose === ours.onclose) transport.onclose = ours.previous.onclose;
    else restored = false;
    if (restored) following.delete(transport);
  };
}

/** What a client's server first listed of a tool: its fingerprint, and how many tools made for it are alive. */
interface FirstSeen {
  readonly fingerprint: string;
  live: number;
}

/**
 * What the server of one client first listed of each tool (a later fingerprint means it changed
 * on the server), shared by every toolset on the client, so that a toolset made for each run on
 * one long-lived client still sees a tool the server changed since an earlier toolset listed it.
 * Kept by the tool's name as the server names it, in normalisation form C (a name spelt anew is
 * the same name), with the fingerprint of its descriptor under that name: a `prefix` is the
 * toolset's renaming, not the server's change, so toolsets of different prefixes share it safely.
 * A record is kept while a tool made for it by any toolset is alive (`live`: listed now, or held
 * by a caller since, whose call may be approved against it), or while the last listing read on
 * the client (by any toolset) offered it (`pinned`), closed toolsets' included. Not once neither
 * holds, so that a server that lists new names without end costs what its current tools do.
 */
interface FirstListed {
  readonly records: Map<string, FirstSeen>;
  pinned: ReadonlyMap<string, FirstSeen>;
  /** Counts a record's `live` down as the descriptors of the tools made for it are collected. */
  readonly collected: FinalizationRegistry<string>;
}

/** By client: nothing is kept of a client once it is gone. */
const firstListed = new WeakMap<McpClient, FirstListed>();

function firstListedOn(client: McpClient): FirstListed {
  let listed = firstListed.get(client);
  if (listed === undefined) {
    const records = new Map<string, FirstSeen>();
    const ours: FirstListed = {
      records,
      pinned: new Map(),
      collected: new FinalizationRegistry<string>((key) => {
        const seen = records.get(key);
        if (seen !== undefined && --seen.live === 0 && ours.pinned.get(key) !== seen) records.delete(key);
      }),
    };
    firstListed.set(client, (listed = ours));
  }
  return listed;
}

/**
 * The default `onError`: a process warning, as loopctl's other background failures give. Node
 * prints it to stderr as it is, and it quotes the server (its name from the handshake, its error
 * messages): what would drive a terminal or hide in the text is shown escaped.
 */
function emitWarning(error: McpServerError | McpCallbackError): void {
  process.emitWarning(printable(error.message), { type: "LoopctlWarning", code: "LOOPCTL_MCP" });
}

/**
 * Calls `callback` in a microtask of its own, and hands what it throws, or a
 * promise it returns rejects with, to `failed` (which must not throw): an
 * application's callback never becomes an uncaught exception or an unhandled
 * rejection.
 */
function callLater(callback: () => unknown, failed: (error: unknown) => void): void {
  queueMicrotask(() => {
    try {
      const returned = callback();
      if (returned instanceof Promise) returned.catch(failed);
    } catch (error) {
      failed(error);
    }
  });
}

/**
 * The tools of one MCP server as loopctl tools, kept current: a
 * {@link ToolSource} an `Agent` reads at the start of every turn. Made by
 * {@link mcpTools}.
 */
export class McpToolset implements ToolSource {
  readonly #client: McpClient;
  readonly #options: McpToolsOptions;
  readonly #server: string;
  readonly #transport: Transport;
  #tools: readonly Tool[] = Object.freeze([]);
  /** By name; each tool's fingerprint is of its descriptor as the server names it (see {@link FirstListed}). */
  #byName = new Map<string, { readonly tool: Tool; readonly fingerprint: string }>();
  /** What the server first listed, shared by every toolset on the client. */
  readonly #firstListed: FirstListed;
  #problems: readonly McpToolProblem[] = Object.freeze([]);
  /** Whether a listing is in progress, or due after the one in progress. */
  #following = false;
  #dirty = false;
  /** Listings asked for so far (each `list_changed`, each `refresh()`). */
  #asked = 0;
  /** The last of those asks the tools answer: a listing begun after it has ended. */
  #answered = 0;
  /** The asks made by `refresh()` calls still waiting: a listing that answers one fails to a caller who awaits it. */
  readonly #awaited = new Set<number>();
  /** Settles when the listing in progress ends, or the toolset closes. */
  #listingEnded: Promise<void> = Promise.resolve();
  #endListing: () => void = () => {};
  /** Aborted by `close()`: the `tools/list` request in flight, cancelled on the server. */
  #request: AbortController | undefined;
  /** Aborted by `close()`: the `tools/call` requests in flight, each cancelled on the server. Each leaves when it ends. */
  readonly #calls = new Set<AbortController>();
  #lastError: McpServerError | undefined;
  /**
   * Whether the default warning told of the failed listings since the last that worked: a server
   * that fails listing after listing, announcing a change each time, is one warning, not a flood.
   */
  #warned = false;
  /**
   * Aborted once no call of the toolset's tools can be sent again (`close()`, or the connection
   * ended): a call parked for approval is then refused, its ask withdrawn.
   */
  readonly #withdrawn = new AbortController();
  #closed = false;
  /** Whether the tools were listed once: the first listing is not a change. */
  #listed = false;
  readonly #unfollow: () => void;
  /** Whether the connection the tools were listed over has ended. */
  #disconnected = false;

  /** Made by {@link mcpTools} (not exported as a value). */
  constructor(client: McpClient, transport: Transport, server: string, options: McpToolsOptions) {
    this.#client = client;
    this.#transport = transport;
    this.#server = server;
    this.#options = options;
    this.#firstListed = firstListedOn(client);
    // One listener for each call parked for approval, however many a wave of calls parks at once.
    setMaxListeners(0, this.#withdrawn.signal);
    this.#unfollow = followTransport(transport, {
      changed: () => {
        if (!this.#closed && !this.#disconnected) this.#changed();
      },
      closed: () => {
        this.#disconnected = true;
        this.#withdraw("the connection to the server ended; the call was not sent");
      },
    });
  }

  /**
   * The current tools (empty after a failed refresh, after `close()`, and once the client is no
   * longer connected over the transport the toolset was made on).
   */
  get tools(): readonly Tool[] {
    return this.#detached() ? NONE : this.#tools;
  }

  /** The current tools: what an `Agent` reads at the start of each turn. */
  current(): readonly Tool[] {
    return this.tools;
  }

  /** Tools the server lists that could not be offered (an unusable name or input schema), with why. */
  get problems(): readonly McpToolProblem[] {
    return this.#problems;
  }

  /** The server's name, as errors give it. */
  get server(): string {
    return this.#server;
  }

  /**
   * Lists the server's tools again now (a `list_changed` does this by
   * itself). Resolves with the new tools; rejects with `McpServerError`
   * when listing fails, and the toolset then has no tools. The failure goes
   * to `onError` too, if one was given; without one it is not also emitted
   * as a process warning, as the failure of a listing nobody awaits is.
   * `signal` stops the wait (it rejects with the signal's reason), not the
   * listing, which is the toolset's.
   *
   * @throws {McpConfigError} when `options` is not an object, has an option other than `signal`, or its
   *   `signal` is not an AbortSignal.
   */
  async refresh(options?: McpRefreshOptions): Promise<readonly Tool[]> {
    if (options !== undefined) refuseUnknown(options, REFRESH_OPTIONS, "an object or undefined");
    const signal = checkedSignal(options?.signal);
    if (this.#closed) throw new McpServerError(this.#server, "the toolset is closed");
    // A cancel that came first asks for nothing.
    if (signal?.aborted === true) throw reasonOf(signal);
    const asked = this.#changed();
    this.#awaited.add(asked);
    try {
      await this.#answer(asked, signal);
    } finally {
      this.#awaited.delete(asked);
    }
    if (this.#closed) throw new McpServerError(this.#server, "the toolset is closed");
    if (this.#lastError !== undefined) throw this.#lastError;
    return this.#tools;
  }

  /**
   * Stops following the server: its notifications are no longer read, the
   * toolset has no tools, and calls to the tools it gave refuse to run (a
   * toolset that no longer follows cannot know they are current). A listing
   * in progress is cancelled, and the calls and refreshes waiting for it
   * are refused at once. Calls already sent are cancelled on the server and
   * fail at once with `McpToolError` (whether they took effect is unknown).
   * The client stays open: close it yourself.
   */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#tools = Object.freeze([]);
    this.#byName = new Map();
    // Waiters see the toolset closed now, not once the server answers (or the request times out).
    this.#endListing();
    this.#request?.abort("the toolset was closed");
    for (const call of [...this.#calls]) call.abort("the toolset was closed");
    this.#calls.clear();
    this.#withdraw("the toolset was closed; the call was not sent");
    this.#unfollow();
  }

  /** Ends the calls of the toolset's tools that wait for approval: none of them could be sent now. */
  #withdraw(why: string): void {
    if (!this.#withdrawn.signal.aborted) this.#withdrawn.abort(new McpServerError(this.#server, why));
  }

  [Symbol.dispose](): void {
    this.close();
  }

  /**
   * Whether the client no longer speaks over the connection this toolset follows: it was closed
   * (or its server went away), or connected anew, maybe to another server, over another transport
   * or the same one (a stdio transport starts a new process). The tools were listed from the
   * server at the other end of that connection, and its notifications are the ones followed.
   */
  #detached(): boolean {
    return this.#disconnected || this.#client.transport !== this.#transport;
  }

  /** Asks for a listing (one is made after the one in progress, if any); returns the ask's number. */
  #changed(): number {
    this.#dirty = true;
    this.#asked += 1;
    if (!this.#following) {
      this.#following = true;
      // It catches every failure of a listing itself (and reports it): nothing is left to reject.
      void this.#follow();
    }
    return this.#asked;
  }

  /**
   * Settles once a listing begun after ask number `asked` has ended (or the
   * toolset closed): the tools are then as current as that ask wanted. Not
   * once the server stops announcing changes, which a server that announces
   * one with every listing never does.
   */
  async #answer(asked: number, signal?: AbortSignal): Promise<void> {
    while (this.#answered < asked && !this.#closed) {
      if (signal === undefined) await this.#listingEnded;
      else await unlessAborted(this.#listingEnded, signal);
    }
  }

  async #follow(): Promise<void> {
    try {
      while (this.#dirty && !this.#closed) {
        this.#dirty = false;
        const asked = this.#asked;
        const before = this.#answered;
        let ended!: () => void;
        this.#listingEnded = new Promise((resolve) => (ended = resolve));
        this.#endListing = ended;
        try {
          const listed = await this.#list();
          if (!this.#closed) this.#install(listed);
          this.#lastError = undefined;
          this.#warned = false;
        } catch (error) {
          const failure =
            error instanceof McpServerError
              ? error
              : new McpServerError(this.#server, `listing the tools failed: ${told(error)}`, { cause: error });
          this.#lastError = failure;
          if (this.#closed) return;
          // The server said its tools changed and we cannot see how: offer none rather than stale ones
          // (calls refuse while listing fails). The last tools listed stay known, so that a tool found
          // unchanged once listing works again is the same tool, and its calls run.
          if (this.#tools.length > 0) this.#publish(Object.freeze([]));
          // A refresh() this listing answers rejects with the failure: its caller has it, and needs no warning too.
          this.#report(
            failure,
            [...this.#awaited].some((ask) => ask > before && ask <= asked),
          );
        } finally {
          this.#answered = asked;
          ended();
        }
      }
    } finally {
      // In the same step as the loop's last look at #dirty: an ask made after it starts a new loop.
      this.#following = false;
    }
  }

  async #list(): Promise<McpTool[]> {
    const tools: McpTool[] = [];
    const cursors = new Set<string>();
    let cursor: string | undefined;
    // The limit is the listing's, not each page's: a server that answers page after page just in
    // time would otherwise hold a listing (and the calls waiting for it) for MAX_PAGES times as long.
    const limit = this.#options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const started = performance.now();
    for (let page = 0; page < MAX_PAGES; page++) {
      if (this.#closed) throw new McpServerError(this.#server, "the toolset is closed");
      if (this.#detached()) {
        throw new McpServerError(
          this.#server,
          "the client is no longer connected over the transport the toolset follows; make a new toolset",
        );
      }
      const left = Math.ceil(limit - (performance.now() - started));
      const late = `tools/list gave no last page within ${limit} ms (${page} ${page === 1 ? "page" : "pages"} read)`;
      if (left <= 0) throw new McpServerError(this.#server, late);
      // A signal for each request: the MCP SDK never removes the abort listener it adds to one.
      const request = new AbortController();
      this.#request = request;
      const { signal } = request;
      let result: Awaited<ReturnType<McpClient["listTools"]>>;
      try {
        result = await this.#client.listTools(cursor === undefined ? undefined : { cursor }, {
          signal,
          timeout: left,
        });
      } catch (error) {
        // A server's own error shaped as the SDK's timeout is a failed listing either way.
        if (page > 0 && isSdkTimeout(error, left, true)) throw new McpServerError(this.#server, late, { cause: error });
        throw new McpServerError(this.#server, `tools/list failed: ${told(error)}`, { cause: error });
      } finally {
        this.#request = undefined;
      }
      if (typeof result !== "object" || result === null || !Array.isArray(result.tools)) {
        throw new McpServerError(this.#server, "tools/list answered with something that is not a tool list");
      }
      if (result.tools.length > MAX_TOOLS - tools.length)
        throw new McpServerError(this.#server, `tools/list gave more than ${MAX_TOOLS} tools`);
      // One by one: spread into a single call, a page of a few hundred thousand overflows the stack.
      for (const tool of result.tools) tools.push(tool);
      const next = result.nextCursor;
      if (next === undefined) {
        if (page > 0) cacheListed(this.#client, tools);
        return tools;
      }
      if (cursors.has(next))
        throw new McpServerError(this.#server, `tools/list gave the cursor ${quotedCursor(next)} twice`);
      cursors.add(next);
      cursor = next;
    }
    throw new McpServerError(this.#server, `tools/list gave more than ${MAX_PAGES} pages`);
  }

  #install(listed: readonly McpTool[]): void {
    const prefix = this.#options.prefix ?? "";
    const byName = new Map<string, { readonly tool: Tool; readonly fingerprint: string }>();
    const problems: McpToolProblem[] = [];
    const entries = listed.map((raw) => {
      const remote = String(raw?.name);
      const name = `${prefix}${remote}`;
      try {
        const descriptor = descriptorOf(name, raw);
        // Of the descriptor under the server's name: toolsets of any prefix compare what the server listed.
        return { name, raw, descriptor, fingerprint: descriptorFingerprint({ ...descriptor, name: remote }) };
      } catch (error) {
        return { name, raw, error };
      }
    });
    // A server runs one tool of a name, which one being its choice: a name listed with two
    // descriptors has no descriptor a person could approve (the rug-pull within one listing).
    const listings = new Map<string, { count: number; fingerprints: Set<string | undefined> }>();
    for (const entry of entries) {
      const seen = listings.get(entry.name) ?? { count: 0, fingerprints: new Set() };
      seen.count += 1;
      seen.fingerprints.add(entry.fingerprint);
      listings.set(entry.name, seen);
    }
    // Names spelt differently that are one text in Unicode's eyes (composed and decomposed) show alike in a
    // prompt: a person cannot tell which tool a call of one would run, nor the model which it writes.
    const spellings = new Map<string, Set<string>>();
    for (const { name } of entries) {
      const text = name.normalize("NFC");
      const names = spellings.get(text) ?? new Set<string>();
      names.add(name);
      spellings.set(text, names);
    }
    const refused = new Set<string>();
    const { records } = this.#firstListed;
    const pinned = new Map<string, FirstSeen>();
    for (const entry of entries) {
      const { name, raw } = entry;
      const text = name.normalize("NFC");
      const alike = spellings.get(text);
      if (alike !== undefined && alike.size > 1) {
        if (refused.has(text)) continue;
        refused.add(text);
        problems.push({
          tool: name,
          error: new McpServerError(
            this.#server,
            `lists ${alike.size} tools named ${shownKey(name)} in spellings that differ only in Unicode normalisation; none ` +
              "is offered, since a person shown the name cannot tell which of them a call would run",
          ),
        });
        continue;
      }
      const seen = listings.get(name);
      if (seen !== undefined && seen.fingerprints.size > 1) {
        if (refused.has(name)) continue;
        refused.add(name);
        problems.push({
          tool: name,
          error: new McpServerError(
            this.#server,
            `lists the tool ${shownKey(name)} ${seen.count} times with different descriptors; none is offered, ` +
              "since which of them a call would run is the server's choice",
          ),
        });
        continue;
      }
      if (byName.has(name)) {
        problems.push({
          tool: name,
          error: new McpServerError(this.#server, `lists the tool ${shownKey(name)} twice; the first is kept`),
        });
        continue;
      }
      if (entry.descriptor === undefined || entry.fingerprint === undefined) {
        problems.push({ tool: name, error: entry.error });
        continue;
      }
      if (requiresTask(raw)) {
        // The MCP SDK client refuses to call it with callTool: a person would be asked about a call that cannot run.
        problems.push({
          tool: name,
          error: new ToolDefinitionError(
            name,
            'requires task-based execution (execution.taskSupport "required"), which mcpTools cannot call; it is not offered',
          ),
        });
        continue;
      }
      const { descriptor, fingerprint } = entry;
      // By the server's name's text in Unicode's eyes: a tool spelt anew (composed, decomposed) looks the same to a person.
      const key = String(raw.name).normalize("NFC");
      const known = this.#byName.get(name);
      if (known?.fingerprint === fingerprint) {
        byName.set(name, known);
        // Alive in this toolset, so its record is there.
        const seen = records.get(key);
        if (seen !== undefined) pinned.set(key, seen);
        continue;
      }
      let tool: Tool;
      try {
        tool = this.#define(name, raw.name, descriptor);
      } catch (error) {
        problems.push({ tool: name, error });
        continue;
      }
      let first = records.get(key);
      if (first === undefined) records.set(key, (first = { fingerprint, live: 0 }));
      else if (first.fingerprint !== fingerprint) markChanged(tool.descriptor);
      // By its descriptor, which the tool holds, and which a hook or an ask may hold without it.
      first.live += 1;
      this.#firstListed.collected.register(tool.descriptor, key);
      pinned.set(key, first);
      byName.set(name, { tool, fingerprint });
    }
    // The last listing read on the client is what the server lists now: what it offered stays pinned, the rest not.
    for (const [key, seen] of this.#firstListed.pinned) {
      if (seen.live === 0 && !pinned.has(key) && records.get(key) === seen) records.delete(key);
    }
    this.#firstListed.pinned = pinned;
    this.#problems = Object.freeze(problems);
    const tools = [...byName.values()].map((entry) => entry.tool);
    const same = tools.length === this.#tools.length && tools.every((tool, i) => tool === this.#tools[i]);
    this.#byName = byName;
    if (!same) this.#publish(Object.freeze(tools));
    this.#listed = true;
  }

  #publish(tools: readonly Tool[]): void {
    this.#tools = tools;
    const { onChange } = this.#options;
    // Outside the listing: a callback that throws cannot change what the toolset offers.
    if (this.#listed && onChange !== undefined) {
      callLater(
        () => onChange(tools),
        (error) => this.#report(new McpCallbackError(this.#server, "onChange", describeError(error), { cause: error })),
      );
    }
  }

  /**
   * Hands `error` to `onError`, or to a process warning when none was given
   * and no caller receives it otherwise (`received`: a `refresh()` rejects with it).
   */
  #report(error: McpServerError | McpCallbackError, received = false): void {
    // Before the first listing, mcpTools rejects with the failure itself: no warning repeats it.
    if (this.#options.onError === undefined) {
      if (!this.#listed || received) return;
      if (error instanceof McpServerError) {
        if (this.#warned) return;
        this.#warned = true;
      }
    }
    const onError = this.#options.onError ?? emitWarning;
    callLater(
      () => onError(error),
      () => {
        // A failing error handler has nowhere left to report to.
      },
    );
  }

  #define(name: string, remote: string, descriptor: ToolDescriptor): Tool {
    const server = this.#server;
    const { result: render, timeoutMs, maxResultBytes = DEFAULT_MAX_RESULT_BYTES } = this.#options;
    let checkOutput: Validator | undefined;
    if (descriptor.outputSchema !== undefined) {
      // Compiled here, once per descriptor: a result is checked by loopctl, whatever the client checks.
      try {
        checkOutput = compileJsonSchema(descriptor.outputSchema as Readonly<Record<string, unknown>>);
      } catch (error) {
        throw new ToolDefinitionError(name, `the output schema does not compile: ${describeError(error)}`, {
          cause: error,
        });
      }
    }
    let self: Tool | undefined;
    const execute = async (input: unknown, context: ToolContext): Promise<unknown> => {
      // A change the server announced before the call ran may be what the gate
      // approved against: wait for it, and run only what is still current.
      await this.#answer(this.#asked, context.signal);
      if (this.#closed) throw new McpToolError(server, name, "the toolset was closed; the call was not sent");
      if (this.#detached()) {
        throw new McpToolError(
          server,
          name,
          "the client is no longer connected over the transport the tool was listed from; the call was not sent",
        );
      }
      const unlisted = this.#lastError;
      if (unlisted !== undefined) {
        throw new McpToolError(
          server,
          name,
          `the server's tools could not be listed (${unlisted.message}); the call was not sent`,
          false,
          { cause: unlisted },
        );
      }
      const current = this.#byName.get(name)?.tool;
      if (current !== self) {
        // Gone from the listing (or listed in a form that cannot be offered): calling again cannot help.
        throw new McpToolError(
          server,
          name,
          current === undefined
            ? "the server no longer offers the tool; the call was not sent"
            : "the tool changed on the server before the call ran; the call was not sent and needs a new decision",
          true,
        );
      }
      // A signal for this call alone, which follows the caller's and the toolset's (`close()`): the MCP SDK
      // never removes the abort listener it adds to a request's signal, and the caller's outlives the call.
      const request = new AbortController();
      const onAbort = (): void => request.abort(context.signal.reason);
      context.signal.addEventListener("abort", onAbort, { once: true });
      if (context.signal.aborted) onAbort();
      this.#calls.add(request);
      const limit = timeoutMs ?? DEFAULT_TIMEOUT_MS;
      let expired = false;
      let deadline: ReturnType<typeof setTimeout> | undefined;
      let result: CallToolResult;
      try {
        // Not sent at all once cancelled: the race below would leave the request's own rejection unhandled.
        request.signal.throwIfAborted();
        // Set in the same step as callTool sets the SDK's timer of the same length, and before it (see isSdkTimeout).
        deadline = setTimeout(() => {
          expired = true;
        }, limit);
        const sent = this.#client.callTool({ name: remote, arguments: input as Record<string, unknown> }, undefined, {
          signal: request.signal,
          timeout: limit,
        });
        // Raced against the signal too: a client that does not honour it must not hold the call past a close.
        result = (await unlessAborted(Promise.resolve(sent), request.signal)) as CallToolResult;
      } catch (error) {
        // A cancel is the gate's to report; anything else is the server's failure to answer, named as such.
        if (context.signal.aborted) throw error;
        if (request.signal.aborted) {
          // Only close() aborts the call apart from the caller: it was sent, so it may have taken effect.
          throw new McpToolError(
            server,
            name,
            "the toolset was closed while the call was in flight: it was cancelled on the server, and whether it " +
              "took effect there is unknown",
          );
        }
        if (this.#detached()) {
          // The connection ended (the transport's close is heard before the SDK's rejection is): the request was sent.
          throw new McpToolError(
            server,
            name,
            `the connection to the server ended while the call was in flight (${told(error)}): whether it ` +
              "took effect there is unknown",
            false,
            { cause: error },
          );
        }
        if (isSdkTimeout(error, limit, expired)) {
          // The MCP SDK gave up waiting and sent notifications/cancelled: the request was sent.
          throw new McpToolError(
            server,
            name,
            `the server did not answer within ${limit} ms (${told(error)}): the call was cancelled on the server, ` +
              "and whether it took effect there is unknown",
            false,
            { cause: error },
          );
        }
        throw new McpToolError(server, name, `tools/call failed: ${told(error)}`, false, { cause: error });
      } finally {
        clearTimeout(deadline);
        this.#calls.delete(request);
        unlisten(context.signal, onAbort);
      }
      // Cut as a record cuts a text: the message lands in records and goes back to the model.
      if (result.isError === true) {
        const said = readResult(result);
        throw new McpToolError(
          server,
          name,
          said.ok
            ? `the server answered with an error: ${recordText(said.text)}`
            : `the server answered with an error, whose text cannot be read: ${told(said.error)}`,
          false,
          said.ok ? undefined : { cause: said.error },
        );
      }
      if (checkOutput !== undefined) {
        // The texts the MCP SDK client gives when it checks (it does only for tools it knows of).
        const structured = result.structuredContent;
        if (structured === undefined) {
          throw new McpToolError(
            server,
            name,
            `tools/call failed: MCP error -32600: Tool ${remote} has an output schema but did not return structured content`,
          );
        }
        // A value nested deeper than the stack goes cannot be checked: refused, as mcpSchemaValidator refuses it.
        let problems: string | undefined;
        try {
          const checked = checkOutput(structured);
          if (checked.type === "invalid") problems = checked.problems.join("; ");
        } catch (error) {
          problems = `$: could not be checked: ${describeError(error)}`;
        }
        if (problems !== undefined) {
          throw new McpToolError(
            server,
            name,
            "tools/call failed: MCP error -32602: Structured content does not match the tool's output schema: " +
              recordText(problems),
          );
        }
      }
      let output: unknown;
      if (render === undefined) {
        const read = readResult(result);
        if (!read.ok) {
          throw new McpToolError(
            server,
            name,
            `the result cannot be read: ${told(read.error)}: the call ran on the server, and its result is not passed on`,
            false,
            { cause: read.error },
          );
        }
        output = read.text;
      } else {
        // Awaited: a promise the result option returns is what the engine would read the text of.
        try {
          output = await render(result, name);
        } catch (error) {
          // The application's own function failed, not the server: the error says so, and that the call ran.
          throw new McpToolError(
            server,
            name,
            `the result option failed: ${told(error)}: the call ran on the server, and its result is not passed on`,
            false,
            { cause: error },
          );
        }
      }
      // A server's answer is its own to size: more than the model can read would only be cut, or overflow its context.
      const bytes = outputBytes(output);
      if (bytes !== undefined && bytes > maxResultBytes) {
        throw new McpToolError(
          server,
          name,
          `the result is ${bytes} bytes of text, more than maxResultBytes (${maxResultBytes}): the call ran on the ` +
            "server, and its result is not passed on",
        );
      }
      return output;
    };
    self = withdrawnWith(
      defineTool({
        name,
        description: descriptor.description,
        input: descriptor.inputSchema as Readonly<Record<string, unknown>>,
        ...(descriptor.title === undefined ? {} : { title: descriptor.title }),
        ...(descriptor.annotations === undefined
          ? {}
          : { annotations: descriptor.annotations as Readonly<Record<string, unknown>> }),
        ...(descriptor.outputSchema === undefined
          ? {}
          : { outputSchema: descriptor.outputSchema as Readonly<Record<string, unknown>> }),
        execute,
      }),
      this.#withdrawn.signal,
    );
    return self;
  }
}

/**
 * Offers every tool of a connected MCP server as a loopctl tool: named as
 * the server names it (after an optional `prefix`), described by what the
 * server lists (title, description, input schema, annotations, output
 * schema: all part of the descriptor grants are pinned to), read over every
 * page of `tools/list`, and kept current on `notifications/tools/list_changed`
 * without touching the client's notification handlers.
 *
 * A tool that changed on the server (annotations included) has a new
 * descriptor, so a grant pinned to the old one no longer decides: the call is
 * asked about again. What the server first listed is remembered per client,
 * for every toolset made on it: a toolset made later on the same client marks
 * a tool the server changed in between as changed. A call approved just
 * before a change announced by the server is not sent. A result with `isError` is a failed call whose text the
 * model reads; the call's signal cancels the request on the server.
 *
 * Call it after `client.connect(transport)`. Hand the toolset to an `Agent`
 * as its `tools`; `close()` it when done (the client stays open). Make the
 * client with `jsonSchemaValidator: mcpSchemaValidator()`: the client checks
 * each result against the server's output schema before loopctl does, by
 * default with a backtracking `RegExp` (which tool calls and listings this
 * cannot tell, nor change).
 *
 * @throws {McpConfigError} when the client is not connected, or an option is wrong or unknown.
 * @throws {McpServerError} when the first listing fails.
 * @throws the reason of `options.signal` when it aborts before the toolset is made.
 *
 * @example
 * ```ts
 * const client = new Client({ name: "app", version: "1.0.0" }, { jsonSchemaValidator: mcpSchemaValidator() });
 * await client.connect(new StdioClientTransport({ command: "mcp-server-filesystem", args: [dir] }));
 * const toolset = await mcpTools(client, { prefix: "fs_" });
 * const agent = new Agent({ model, tools: toolset, managers: managers.withHook(mcpAnnotationHook()) });
 * ```
 */
export async function mcpTools(client: McpClient, options: McpToolsOptions = {}): Promise<McpToolset> {
  if (
    typeof client !== "object" ||
    client === null ||
    typeof client.listTools !== "function" ||
    typeof client.callTool !== "function" ||
    typeof client.getServerVersion !== "function"
  ) {
    throw new McpConfigError("client", "must be an MCP SDK Client");
  }
  const transport = client.transport;
  if (transport === undefined)
    throw new McpConfigError("client", "is not connected: call client.connect(transport) first");
  refuseUnknown(options, OPTIONS);
  const { prefix, server, onChange, onError, result, timeoutMs, maxResultBytes } = options;
  const signal = checkedSignal(options.signal);
  if (prefix !== undefined && typeof prefix !== "string") throw new McpConfigError("prefix", "must be a string");
  // Every tool would otherwise be a problem, and the toolset offer none without saying why.
  if (prefix !== undefined && !PREFIX.test(prefix))
    throw new McpConfigError(
      "prefix",
      `must be at most ${MAX_NAME_LENGTH - 1} characters without whitespace or control characters (a tool's name is at most ${MAX_NAME_LENGTH}, without either), got ${shownText(prefix)}`,
    );
  if (server !== undefined && (typeof server !== "string" || server === ""))
    throw new McpConfigError("server", "must be a non-empty string");
  for (const [option, value] of [
    ["onChange", onChange],
    ["onError", onError],
    ["result", result],
  ] as const) {
    if (value !== undefined && typeof value !== "function") throw new McpConfigError(option, "must be a function");
  }
  // A timer asked to wait longer than 2^31 - 1 ms fires after 1 ms: every request would time out at once.
  if (timeoutMs !== undefined && (!Number.isSafeInteger(timeoutMs) || timeoutMs <= 0 || timeoutMs > MAX_TIMEOUT_MS))
    throw new McpConfigError("timeoutMs", `must be a positive integer of at most ${MAX_TIMEOUT_MS} (about 24.8 days)`);
  if (maxResultBytes !== undefined && (!Number.isSafeInteger(maxResultBytes) || maxResultBytes <= 0))
    throw new McpConfigError("maxResultBytes", "must be a positive integer (bytes of UTF-8)");
  // A cancel that came first follows nothing and lists nothing.
  if (signal?.aborted === true) throw reasonOf(signal);
  const name = server ?? handshakeName(client.getServerVersion()?.name) ?? "mcp";
  const toolset = new McpToolset(client, transport, name, options);
  try {
    // Closed on a cancel as on a failure: the listing is cancelled on the server, the transport let go.
    await toolset.refresh(signal === undefined ? undefined : { signal });
    return toolset;
  } catch (error) {
    toolset.close();
    throw error;
  }
}
