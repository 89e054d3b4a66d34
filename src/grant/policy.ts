import { everyKey } from "../unknown-option.js";
import { canonicalJson } from "./canonical.js";
import { digest16, descriptorDigest, descriptorFingerprint, type ToolDescriptor } from "./digest.js";
import { GrantConfigError, GrantRecordError } from "./errors.js";
import { shownValue } from "../errors.js";
import { shownKey } from "../unknown-option.js";
import { Grant, GrantScope, type GrantVerdict } from "./grant.js";
import { coveringList, coveringOf, type CoveringGrants } from "./grant-index.js";
import { callSignal, isGrantStore, type GrantStore, type StoreCallOptions } from "./store.js";

/**
 * What the remembered grants say about one call:
 * - `allow` / `deny`: the deciding grant;
 * - `ask` with `no_grant`: nothing covers the call;
 * - `ask` with `tool_changed`: an allow grant covers the call but is pinned
 *   to a descriptor the tool no longer has (the rug-pull), so ask again.
 */
export type GrantDecision =
  | { readonly type: "allow"; readonly grant: Grant }
  | { readonly type: "deny"; readonly grant: Grant }
  | { readonly type: "ask"; readonly reason: "no_grant" }
  | { readonly type: "ask"; readonly reason: "tool_changed"; readonly grant: Grant };

/** Which digest a pin was compared with. */
export type PinKind = "fingerprint" | "legacy_digest";

/**
 * How a grant's pin compares with the tool's current descriptor.
 * `unchecked` means no descriptor was given (only in {@link GrantPolicy.explain}).
 */
export type PinStatus =
  | { readonly type: "unpinned" }
  | { readonly type: "match"; readonly kind: PinKind }
  | { readonly type: "mismatch"; readonly kind: PinKind | "unknown_format" }
  | { readonly type: "unchecked" };

/** One grant that covers the explained call. */
export interface CoveringGrantExplanation {
  /** The covering grant. */
  readonly grant: Grant;
  /** How its pin compares with the descriptor. */
  readonly pin: PinStatus;
}

/** Why a call would be allowed, denied or asked about: for `loopctl grants explain`. */
export interface GrantExplanation {
  /** The tool asked about. */
  readonly tool: string;
  /** `argsDigest(args)`. */
  readonly argsDigest: string;
  /**
   * What {@link GrantPolicy.decide} returns for the call, or `null` when no
   * descriptor was given and the outcome depends on a pin that could not be
   * checked.
   */
  readonly decision: GrantDecision | null;
  /** The grant behind the decision, or null. */
  readonly deciding: Grant | null;
  /** Every grant that covers the call: the denies, then the allows, each this_call before this_tool. */
  readonly covering: readonly CoveringGrantExplanation[];
  /** The same, as lines for people. */
  readonly lines: readonly string[];
}

/** Options for {@link GrantPolicy.remember}. */
export interface RememberOptions extends StoreCallOptions {
  /** `createdAtMs` of the new grant. @default Date.now() */
  readonly nowMs?: number;
  /** A note for people. */
  readonly note?: string;
}

const REMEMBER_OPTIONS = everyKey<RememberOptions>()(["signal", "nowMs", "note"]);

const LEGACY_PIN = /^[0-9a-f]{16}$/;

/** Computes each descriptor digest at most once per decision, and only if a pin needs it. */
function pinChecker(descriptor: ToolDescriptor | undefined): (grant: Grant) => PinStatus {
  let fingerprint: string | undefined;
  let legacy: string | undefined;
  return (grant) => {
    const pin = grant.pinnedDescriptor;
    if (pin === null) return { type: "unpinned" };
    if (descriptor === undefined) return { type: "unchecked" };
    if (pin.startsWith("sha256:")) {
      fingerprint ??= descriptorFingerprint(descriptor);
      return pin === fingerprint ? { type: "match", kind: "fingerprint" } : { type: "mismatch", kind: "fingerprint" };
    }
    if (LEGACY_PIN.test(pin)) {
      legacy ??= descriptorDigest(descriptor);
      return pin === legacy ? { type: "match", kind: "legacy_digest" } : { type: "mismatch", kind: "legacy_digest" };
    }
    return { type: "mismatch", kind: "unknown_format" };
  };
}

/**
 * The decision rule. Deny wins over allow, whatever the scope. A deny stays
 * in force even when its pin no longer matches: asking again could only
 * loosen it, and pins exist to stop a changed tool riding an old approval.
 * An allow counts only when unpinned or pinned to the current descriptor; a
 * covering allow whose pin is stale means ask again, saying the tool changed.
 */
function decideFrom(covering: CoveringGrants, pinOf: (grant: Grant) => PinStatus): GrantDecision | null {
  const deny = covering.thisCall.deny ?? covering.thisTool.deny;
  if (deny !== undefined) return { type: "deny", grant: deny };
  let stale: Grant | undefined;
  let unchecked = false;
  for (const allow of [covering.thisCall.allow, covering.thisTool.allow]) {
    if (allow === undefined) continue;
    const pin = pinOf(allow);
    switch (pin.type) {
      case "unpinned":
      case "match":
        return { type: "allow", grant: allow };
      case "mismatch":
        stale ??= allow;
        break;
      case "unchecked":
        unchecked = true;
        break;
      default:
        return assertNever(pin);
    }
  }
  if (unchecked) return null;
  if (stale !== undefined) return { type: "ask", reason: "tool_changed", grant: stale };
  return { type: "ask", reason: "no_grant" };
}

function assertNever(value: never): never {
  throw new TypeError(`unexpected value ${JSON.stringify(value)}`);
}

function requireDescriptor(descriptor: ToolDescriptor, where: string): void {
  if (
    typeof descriptor !== "object" ||
    descriptor === null ||
    typeof descriptor.name !== "string" ||
    descriptor.name === ""
  ) {
    throw new GrantRecordError(`${where}: the tool descriptor must have a non-empty name`);
  }
  // A Tool in its place (a name, but neither a description nor an input schema of its own) would be pinned by its name alone.
  if (descriptor.description === undefined && descriptor.inputSchema === undefined) {
    throw new GrantRecordError(
      `${where}: the tool descriptor has neither a description nor an inputSchema, so only its name would be pinned (for a Tool, pass tool.descriptor)`,
    );
  }
}

/**
 * The grant an approver's answer becomes: this call's arguments only
 * (`"this_call"`, the narrowest) or every call of the tool (`"this_tool"`),
 * pinned to `descriptorFingerprint(descriptor)`.
 *
 * @throws {CanonicalJsonError} when `args` or the input schema has no JSON form.
 * @throws {GrantRecordError} for a bad scope, verdict, time or descriptor.
 */
export function grantForAnswer(
  descriptor: ToolDescriptor,
  args: unknown,
  verdict: GrantVerdict,
  scope: "this_call" | "this_tool",
  nowMs: number,
  note?: string | null,
): Grant {
  requireDescriptor(descriptor, "grantForAnswer");
  let grantScope: GrantScope;
  if (scope === "this_call") grantScope = GrantScope.thisCall(args);
  else if (scope === "this_tool") grantScope = GrantScope.thisTool();
  else {
    throw new GrantRecordError(
      `grant for tool ${shownKey(descriptor.name)}: scope must be "this_call" or "this_tool", got ${shownValue(scope)}`,
    );
  }
  return new Grant(descriptor.name, verdict, grantScope, {
    pinnedDescriptor: descriptorFingerprint(descriptor),
    createdAtMs: nowMs,
    note: note ?? null,
  });
}

/**
 * "Ask once and remember": decides a call from the grants in a store.
 *
 * A decision reads only the grants that cover the call, through the store's
 * {@link GrantStore.covering}: the built-in stores (and `PostgresGrantStore`)
 * answer it from an index, so its cost does not grow with the ledger. A store
 * without it is loaded per decision.
 *
 * @example
 * const policy = new GrantPolicy(new FileGrantStore(FileGrantStore.defaultRoot(), process.cwd()));
 * const decision = await policy.decide(tool.descriptor, args);
 * if (decision.type === "ask") {
 *   // ask a person, then:
 *   await policy.remember(tool.descriptor, args, "allow", "this_call");
 * }
 */
export class GrantPolicy {
  readonly #store: GrantStore;

  /**
   * @param store Where grants are read from and remembered to.
   * @throws {GrantConfigError} naming `store` when it does not have `load`,
   *   `save`, `revoke` and `clear` as functions.
   */
  constructor(store: GrantStore) {
    if (!isGrantStore(store)) {
      throw new GrantConfigError(
        "GrantPolicy",
        "store",
        `must be a GrantStore (load, save, revoke and clear as functions), got ${shownValue(store)}`,
      );
    }
    this.#store = store;
  }

  /** The store this policy reads and writes. */
  get store(): GrantStore {
    return this.#store;
  }

  /**
   * Decides a call of the tool `descriptor` describes with `args`: deny
   * wins over allow; a covering allow pinned to another descriptor asks
   * again with `tool_changed` (16-hex legacy pins are compared with
   * {@link descriptorDigest}, `sha256:` pins with {@link descriptorFingerprint});
   * unpinned grants always match.
   *
   * @param options.signal Passed to the store; the decision rejects with its reason once aborted.
   * @throws {GrantConfigError} naming `options` when it has a key other than
   *   `signal`, or is an AbortSignal itself (pass it as `{ signal }`).
   * @throws {CanonicalJsonError} when `args` has no JSON form (never a silent allow).
   * @throws whatever the store throws, e.g. LedgerCorruptError.
   */
  async decide(descriptor: ToolDescriptor, args: unknown, options: StoreCallOptions = {}): Promise<GrantDecision> {
    const signal = callSignal("GrantPolicy.decide", options);
    requireDescriptor(descriptor, "GrantPolicy.decide");
    const canonical = canonicalJson(args);
    const covering = await coveringOf(this.#store, descriptor.name, canonical, { signal });
    const decision = decideFrom(covering, pinChecker(descriptor));
    // With a descriptor every pin is checked, so the rule always reaches a decision.
    return decision ?? { type: "ask", reason: "no_grant" };
  }

  /**
   * Turns an answer into a grant with {@link grantForAnswer} (pinned with the
   * descriptor's fingerprint, `createdAtMs` from `options.nowMs` or the
   * clock) and saves it, replacing the same rule if already stored.
   * `options.signal` is passed to the store's save.
   *
   * @throws {GrantConfigError} naming `options` when it has a key other than
   *   `signal`, `nowMs` and `note`, or is an AbortSignal itself.
   */
  async remember(
    descriptor: ToolDescriptor,
    args: unknown,
    verdict: GrantVerdict,
    scope: "this_call" | "this_tool",
    options: RememberOptions = {},
  ): Promise<Grant> {
    const signal = callSignal("GrantPolicy.remember", options, REMEMBER_OPTIONS);
    requireDescriptor(descriptor, "GrantPolicy.remember");
    const grant = grantForAnswer(descriptor, args, verdict, scope, options.nowMs ?? Date.now(), options.note);
    return this.#store.save(grant, { signal });
  }

  /**
   * Explains how a call would be decided: every covering grant with its pin
   * status, the deciding grant and readable lines. Without `descriptor` pins
   * cannot be checked, and `decision` is null when the outcome hinges on one.
   *
   * @throws {GrantConfigError} naming `tool` when it is not a non-empty
   *   string: `explain` takes the tool's name, where `decide` and `remember`
   *   take its descriptor.
   * @throws {GrantRecordError} when `descriptor` names another tool.
   * @throws {CanonicalJsonError} when `args` has no JSON form.
   */
  async explain(tool: string, args: unknown, descriptor?: ToolDescriptor): Promise<GrantExplanation> {
    if (typeof tool !== "string" || tool === "") {
      // A descriptor here (as decide and remember take) would be looked up as "[object Object]": no grant covers it.
      const named = typeof tool === "object" && tool !== null && typeof (tool as { name?: unknown }).name === "string";
      throw new GrantConfigError(
        "GrantPolicy.explain",
        "tool",
        `must be the tool's name, a non-empty string, got ${shownValue(tool)}` +
          (named ? " (for a descriptor, pass descriptor.name, and the descriptor as the third argument)" : ""),
      );
    }
    if (descriptor !== undefined) {
      requireDescriptor(descriptor, "GrantPolicy.explain");
      if (descriptor.name !== tool) {
        throw new GrantRecordError(
          `explain: the descriptor is for tool ${shownKey(descriptor.name)}, not ${shownKey(tool)}`,
        );
      }
    }
    const canonical = canonicalJson(args);
    const covering = await coveringOf(this.#store, tool, canonical, {});
    const pinOf = pinChecker(descriptor);
    const decision = decideFrom(covering, pinOf);
    const deciding = decision !== null && "grant" in decision ? decision.grant : null;
    const list = coveringList(covering).map((grant) => ({ grant, pin: pinOf(grant) }));
    const digest = digest16(canonical);

    const lines = [
      `tool ${shownKey(tool)} with args ${digest}: ${list.length === 1 ? "1 covering grant" : `${list.length} covering grants`}`,
    ];
    for (const { grant, pin } of list) {
      const scope = grant.scope.type === "this_tool" ? "this tool" : "this call";
      const mark = grant === deciding ? " [deciding]" : "";
      lines.push(`  ${grant.verdict} ${scope}, grant ${grant.id}, ${describePin(pin)}${mark}`);
    }
    lines.push(describeDecision(decision));
    return { tool, argsDigest: digest, decision, deciding, covering: list, lines };
  }
}

function describePin(pin: PinStatus): string {
  switch (pin.type) {
    case "unpinned":
      return "unpinned";
    case "unchecked":
      return "pinned (not checked: no descriptor given)";
    case "match":
      return pin.kind === "fingerprint" ? "pin matches (sha256 fingerprint)" : "pin matches (legacy 16-hex digest)";
    case "mismatch":
      return pin.kind === "unknown_format"
        ? "pin in an unknown format: treated as not matching"
        : `pin does not match the tool's current ${pin.kind === "fingerprint" ? "fingerprint" : "legacy digest"}`;
    default:
      return assertNever(pin);
  }
}

function describeDecision(decision: GrantDecision | null): string {
  if (decision === null) return "decision: depends on the tool's current descriptor (pass it to check pins)";
  switch (decision.type) {
    case "allow":
      return `decision: allow, by grant ${decision.grant.id}`;
    case "deny":
      return `decision: deny, by grant ${decision.grant.id}`;
    case "ask":
      return decision.reason === "no_grant"
        ? "decision: ask (no grant covers this call)"
        : `decision: ask (the tool changed since grant ${decision.grant.id} was pinned)`;
    default:
      return assertNever(decision);
  }
}
