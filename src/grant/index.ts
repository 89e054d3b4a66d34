/**
 * `loopctl/grant`: canonical digests, grants, grant stores and the policy
 * that decides a call from remembered approvals.
 *
 * @packageDocumentation
 */
export { canonicalJson, compareCodePoints, CANONICAL_JSON_MAX_DEPTH } from "./canonical.js";
export {
  argsDigest,
  argsSha256,
  descriptorDigest,
  descriptorFingerprint,
  digest16,
  projectIdentity,
} from "./digest.js";
export type { ToolDescriptor } from "./digest.js";
export {
  CanonicalJsonError,
  GrantIdCollisionError,
  GrantRecordError,
  LedgerCorruptError,
  LedgerIoError,
  LedgerLockError,
} from "./errors.js";
export { Grant, GrantRecordSchema, GrantScope } from "./grant.js";
export type { GrantRecord, GrantVerdict } from "./grant.js";
export { GrantIndex } from "./grant-index.js";
export type { CoveringGrants, VerdictSlots } from "./grant-index.js";
export { MemoryGrantStore } from "./store.js";
export type { GrantStore } from "./store.js";
export { FileGrantStore } from "./file-store.js";
export type { ClearOptions, FileGrantStoreOptions, LedgerWarning, WriteOptions } from "./file-store.js";
export { GrantPolicy, grantForAnswer } from "./policy.js";
export type {
  CoveringGrantExplanation,
  GrantDecision,
  GrantExplanation,
  PinKind,
  PinStatus,
  RememberOptions,
} from "./policy.js";
