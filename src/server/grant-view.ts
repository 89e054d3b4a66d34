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

/**
 * The view of `grant`, its pin checked against `describeTool(grant.tool)` when
 * that knows the tool. A tool that cannot be checked (`describeTool` throws,
 * or gives a descriptor with no canonical form, such as a schema object of a
 * validation library) shows as `unchecked`, the fault going to `onError`: one
 * such tool must not keep every grant from being listed and revoked.
 */
export function grantView(
  grant: Grant,
  describeTool: ((name: string) => ToolDescriptor | undefined) | undefined,
  onError: (error: unknown) => void = () => undefined,
): GrantView {
  let pin: PinStatus = { type: "unpinned" };
  if (grant.pinnedDescriptor !== null) {
    try {
      pin = pinStatus(grant.pinnedDescriptor, describeTool?.(grant.tool));
    } catch (error) {
      onError(error);
      pin = { type: "unchecked" };
    }
  }
  return {
    id: grant.id,
    tool: grant.tool,
    verdict: grant.verdict,
    scope: grant.scope.type,
    args: grant.scope.type === "this_call" ? grant.scope.args : null,
    pinnedDescriptor: grant.pinnedDescriptor,
    pin,
    createdAtMs: grant.createdAtMs,
    note: grant.note,
  };
}
