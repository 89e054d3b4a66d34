export { NIL_UUID, PendingAskSchema, AskResolutionSchema } from "./types.js";
export type { PendingAsk, AskResolution, AskResolver, ResolveOptions, RememberScope } from "./types.js";
