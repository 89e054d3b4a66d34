// The grants the crash and race writers save, so the tests can name them.
import { Grant, GrantScope } from "../../src/grant/index.js";

/** Writer `who`'s n-th grant of its own. */
export const ownGrant = (who: string, n: number): Grant =>
  new Grant("write", "allow", GrantScope.thisCall({ who, n, pad: "x".repeat(n % 7) })).withNote(`${who}#${n}`);

/** The n-th grant every racer saves and revokes (same id in every process). */
export const sharedGrant = (n: number): Grant => new Grant("deploy", "deny", GrantScope.thisCall({ shared: n }));

/** The deny a second writer saves while the first is paused. */
export const denyGrant = (who: string): Grant => new Grant("deploy", "deny", GrantScope.thisTool()).withNote(who);
