import { z } from "zod";

// Spelled out rather than /i so the generated JSON Schema pattern accepts what zod accepts.
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;
const DIGEST16 = /^[0-9a-f]{16}$/;
/** 64 lowercase hex digits: a SHA-256 as `argsSha256` and `askDigest` write it. */
export const SHA256 = /^[0-9a-f]{64}$/;

/** The nil UUID, used as `runId` when an ask is raised outside any run. */
export const NIL_UUID = "00000000-0000-0000-0000-000000000000";

/**
 * Parses a {@link PendingAsk} from untrusted JSON (a webhook body, a queue
 * message). Unknown fields are dropped; the call's arguments never ride an
 * ask. `argsSha256` is optional so that asks made before it existed still parse.
 */
export const PendingAskSchema = z.object({
  /** UUID of this ask; answers are matched by it. */
  id: z.string().regex(UUID, "must be a UUID"),
  /** UUID of the agent session. */
  sessionId: z.string().regex(UUID, "must be a UUID"),
  /** UUID of the run, or {@link NIL_UUID} when there is none. */
  runId: z.string().regex(UUID, "must be a UUID"),
  /** 0-based model turn within the run. */
  turn: z.number().int().nonnegative(),
  /** The model's id for the tool call. */
  callId: z.string(),
  /** The tool's name. */
  tool: z.string().min(1),
  /** `argsDigest(input)`: 16 hex digits (FNV-1a 64) over the canonical JSON of the arguments. */
  argsDigest: z.string().regex(DIGEST16, "must be 16 lowercase hex digits"),
  /** `argsSha256(input)`: 64 hex digits (sha256) over the same canonical JSON. */
  argsSha256: z.string().regex(SHA256, "must be 64 lowercase hex digits").optional(),
  /** The text the hook asked the human. */
  prompt: z.string(),
});

/**
 * A tool call parked before it executes, waiting for a human (or a policy
 * service) to answer. Serializable as JSON; carries only the digests of the
 * call's arguments, never the arguments.
 */
export type PendingAsk = Readonly<z.infer<typeof PendingAskSchema>>;

const RememberScopeSchema = z.enum(["this_call", "this_tool"]);

/**
 * How wide a grant an answer asks the engine to remember:
 * `"this_call"` (these exact arguments) or `"this_tool"` (any arguments).
 */
export type RememberScope = z.infer<typeof RememberScopeSchema>;

/** Parses an {@link AskResolution} from untrusted JSON. */
export const AskResolutionSchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("approve"), remember: RememberScopeSchema.optional() }),
  z.object({ type: z.literal("deny"), reason: z.string().optional(), remember: RememberScopeSchema.optional() }),
]);

/** The answer to an ask. A denial is an outcome, not an error. */
export type AskResolution = Readonly<z.infer<typeof AskResolutionSchema>>;

/** Options the engine passes to {@link AskResolver.resolve}. */
export interface ResolveOptions {
  /**
   * Aborts when the engine stops waiting, however the park ended: its
   * deadline, a cancel, an answer, or the resolver's own failure (a throw, a
   * rejection, an answer that is not an {@link AskResolution}). Whatever the
   * resolver left waiting on it is then withdrawn. A resolver must tolerate
   * it; an answer given after it aborts is ignored. The engine makes it when
   * it is first read; read after the park ended, it is already aborted.
   */
  readonly signal: AbortSignal;
}

/** Answers asks. The engine awaits exactly one resolution per ask. */
export interface AskResolver {
  resolve(ask: PendingAsk, options: ResolveOptions): Promise<AskResolution>;
}

const WithdrawnReasonSchema = z.enum(["expired", "cancelled", "closed", "abandoned", "unknown"]);

/** Why an ask ended without an answer. */
export type WithdrawnReason = z.infer<typeof WithdrawnReasonSchema>;

/**
 * Parses an {@link AskEnding} from an {@link AskInbox} the code does not
 * control. Exactly the fields of one of its shapes: anything more is not an
 * ending it can read.
 */
export const AskEndingSchema = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("answered"), verdict: z.enum(["approve", "deny"]) }),
  z.strictObject({ type: z.literal("withdrawn"), reason: WithdrawnReasonSchema }),
]);

/**
 * How an ask ended, as an approver learns it: answered (by whichever
 * approver got there first), or withdrawn: the engine's deadline passed
 * (`expired`), its run was cancelled (`cancelled`), the channel, queue or
 * inbox closed (`closed`), the approver was dropped or a worker died and its
 * lease lapsed (`abandoned`), or the id is not known (`unknown`: never
 * parked, or ended long ago).
 */
export type AskEnding = Readonly<z.infer<typeof AskEndingSchema>>;

/** Options for {@link AskInbox.resolve}. */
export interface AnswerOptions {
  /**
   * The `askDigest(ask)` of the ask the answer was made for (the one the
   * person saw). Given it, the answer reaches the call waiting under the id
   * only if that call's ask has this digest: an id can come back with another
   * call behind it, and an answer made for the one that ended must not land
   * on the new one.
   */
  readonly askDigest?: string;
}

/**
 * What an approval server or console needs from an approver: the channel's
 * {@link Approver}, or any other source of asks (a queue, a webhook inbox).
 */
export interface AskInbox {
  /** The next ask to answer, waiting for one; `undefined` once the inbox is closed. */
  next(options?: { signal?: AbortSignal }): Promise<PendingAsk | undefined>;
  /**
   * Answers an ask by id; `true` only if the answer reached a call still
   * waiting for it. With `options.askDigest` (the approval server passes it
   * whenever it knows which ask the answer was made for), `false` also when
   * the call waiting under that id is not that ask: an inbox of your own
   * should check it (`askDigest(waiting) === options.askDigest`), since an
   * inbox that ignores it lets such an answer reach whichever call holds the
   * id.
   */
  resolve(askId: string, resolution: AskResolution, options?: AnswerOptions): boolean | Promise<boolean>;
  /** Resolves once the ask has ended, however it ended; an unknown or already-ended id resolves at once. */
  ended(askId: string, options?: { signal?: AbortSignal }): Promise<AskEnding>;
  /**
   * Optional, for an inbox that learns of the asks already pending some time
   * after it is made (a database read): resolves once `next()` has handed out
   * every ask that was pending when the inbox was made (those that ended
   * first excepted) and has been called again since the last of them, so a
   * consumer that takes asks one `next()` at a time holds them all. Resolves
   * at once when that is so already, or once the inbox is closed; rejects
   * with the signal's reason if it aborts first. An inbox without it is
   * taken to hold nothing it has not handed out (the channel's `Approver`).
   */
  caughtUp?(options?: { signal?: AbortSignal }): Promise<void>;
  /** Stops the inbox; what happens to asks still waiting is the implementation's to document. */
  close(): void | Promise<void>;
}
