/** The release the demo ships, and the arguments of the calls that ship it. */

/** The version released. */
export const VERSION = "1.4.0";

export const USER_TEXT = `Prepare and ship release ${VERSION}.`;

export const CHANGELOG = {
  version: VERSION,
  entries: [
    "Faster cold start: lazy-load the editor bundle",
    "Fix: session cookie kept after sign-out",
    "Docs: self-hosting guide",
  ],
};
export const STAGING = { env: "staging", version: VERSION };
export const PRODUCTION = { env: "production", version: VERSION };
/** What an agent tries when production is refused: the same deploy, its checks skipped. */
export const PRODUCTION_SKIP_CHECKS = { env: "production", version: VERSION, skipChecks: true };
