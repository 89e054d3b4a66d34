import { descriptorDigest, descriptorFingerprint } from "../grant/digest.js";
import type { ToolDescriptor } from "../grant/digest.js";
import type { Grant } from "../grant/grant.js";
import type { PinStatus } from "../grant/policy.js";

/** A grant as the API lists it. */
export interface GrantView {
  readonly id: string;
  readonly tool: string;
  readonly verdict: "allow" | "deny";
  readonly scope: "this_tool" | "this_call";
  /** The arguments a `this_call` grant covers, else null. */
  readonly args: unknown;
  readonly pinnedDescriptor: string | null;
  /** The pin against the tool's current descriptor (`unchecked` when the server was not told the tool). */
  readonly pin: PinStatus;
  readonly createdAtMs: number;
  readonly note: string | null;
}

const LEGACY_PIN = /^[0-9a-f]{16}$/;

/** A tool's current descriptor as pins are checked against it, each form computed once, when first needed. */
class CheckedTool {
  readonly #descriptor: ToolDescriptor;
  #fingerprint: string | undefined;
  #digest: string | undefined;

  constructor(descriptor: ToolDescriptor) {
    this.#descriptor = descriptor;
  }

  /** @throws whatever the descriptor's canonical form throws (a schema with no JSON form). */
  pinStatus(pin: string): PinStatus {
    if (pin.startsWith("sha256:")) {
      this.#fingerprint ??= descriptorFingerprint(this.#descriptor);
      return pin === this.#fingerprint
        ? { type: "match", kind: "fingerprint" }
        : { type: "mismatch", kind: "fingerprint" };
    }
    if (LEGACY_PIN.test(pin)) {
      this.#digest ??= descriptorDigest(this.#descriptor);
      return pin === this.#digest
        ? { type: "match", kind: "legacy_digest" }
        : { type: "mismatch", kind: "legacy_digest" };
    }
    return { type: "mismatch", kind: "unknown_format" };
  }
}

/**
 * Makes grants' views for one listing: `describeTool` is asked once per
 * tool the listing names, and each tool's descriptor digested once, not
 * once per grant, so a listing of thousands of grants of one tool does not
 * hold the event loop (and the answers waiting on it) for a second. A tool
 * that cannot be checked (`describeTool` throws, or gives a descriptor with
 * no canonical form, such as a schema object of a validation library) shows
 * its grants as `unchecked`, the fault going to `onError` once: one such
 * tool must not keep every grant from being listed and revoked.
 */
export function grantViews(
  describeTool: ((name: string) => ToolDescriptor | undefined) | undefined,
  onError: (error: unknown) => void = () => undefined,
): (grant: Grant) => GrantView {
  /** Per tool: its checked descriptor, undefined when not known, or "failed" once it could not be checked. */
  const tools = new Map<string, CheckedTool | undefined | "failed">();
  const pinStatus = (tool: string, pin: string): PinStatus => {
    let checked = tools.get(tool);
    if (!tools.has(tool)) {
      try {
        const descriptor = describeTool?.(tool);
        checked = descriptor === undefined ? undefined : new CheckedTool(descriptor);
      } catch (error) {
        onError(error);
        checked = "failed";
      }
      tools.set(tool, checked);
    }
    if (checked === undefined || checked === "failed") return { type: "unchecked" };
    try {
      return checked.pinStatus(pin);
    } catch (error) {
      onError(error);
      tools.set(tool, "failed");
      return { type: "unchecked" };
    }
  };
  return (grant) => ({
    id: grant.id,
    tool: grant.tool,
    verdict: grant.verdict,
    scope: grant.scope.type,
    args: grant.scope.type === "this_call" ? grant.scope.args : null,
    pinnedDescriptor: grant.pinnedDescriptor,
    pin: grant.pinnedDescriptor === null ? { type: "unpinned" } : pinStatus(grant.tool, grant.pinnedDescriptor),
    createdAtMs: grant.createdAtMs,
    note: grant.note,
  });
}
