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

function pinStatus(pin: string | null, descriptor: ToolDescriptor | undefined): PinStatus {
  if (pin === null) return { type: "unpinned" };
  if (descriptor === undefined) return { type: "unchecked" };
  if (pin.startsWith("sha256:")) {
    return pin === descriptorFingerprint(descriptor)
      ? { type: "match", kind: "fingerprint" }
      : { type: "mismatch", kind: "fingerprint" };
  }
  if (LEGACY_PIN.test(pin)) {
    return pin === descriptorDigest(descriptor)
      ? { type: "match", kind: "legacy_digest" }
      : { type: "mismatch", kind: "legacy_digest" };
  }
  return { type: "mismatch", kind: "unknown_format" };
}

/** The view of `grant`, its pin checked against `describeTool(grant.tool)` when that knows the tool. */
export function grantView(
  grant: Grant,
  describeTool: ((name: string) => ToolDescriptor | undefined) | undefined,
): GrantView {
  let descriptor: ToolDescriptor | undefined;
  try {
    descriptor = describeTool?.(grant.tool);
  } catch {
    descriptor = undefined;
  }
  return {
    id: grant.id,
    tool: grant.tool,
    verdict: grant.verdict,
    scope: grant.scope.type,
    args: grant.scope.type === "this_call" ? grant.scope.args : null,
    pinnedDescriptor: grant.pinnedDescriptor,
    pin: pinStatus(grant.pinnedDescriptor, descriptor),
    createdAtMs: grant.createdAtMs,
    note: grant.note,
  };
}
