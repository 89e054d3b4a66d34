/**
 * `loopctl/grant`: canonical digests, grants, grant stores and the policy
 * that decides a call from remembered approvals.
 *
 * @packageDocumentation
 */
export {
  canonicalJson,
  compareCodePoints,
  CANONICAL_JSON_MAX_BYTES,
  CANONICAL_JSON_MAX_DEPTH,
  CANONICAL_JSON_MAX_NODES,
  CanonicalJsonLimitError,
} from "./canonical.js";
export type { CanonicalJsonLimit } from "./canonical.js";
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
  GrantConfigError,
  GrantIdCollisionError,
  GrantRecordError,
  LedgerCorruptError,
  LedgerFormatError,
  LedgerIoError,
  LedgerLockError,
} from "./errors.js";
export { Grant, GrantRecordSchema, GrantScope } from "./grant.js";
export type { GrantMetadata, GrantRecord, GrantVerdict } from "./grant.js";
export { MemoryGrantStore } from "./store.js";
export type { GrantStore, StoreCallOptions } from "./store.js";
export { FileGrantStore } from "./file-store.js";
export type { ClearOptions, FileGrantStoreOptions, LedgerLockWait, LedgerWarning } from "./file-store.js";
export { GrantPolicy, grantForAnswer } from "./policy.js";
export type {
  CoveringGrantExplanation,
  GrantDecision,
  GrantExplanation,
  PinKind,
  PinStatus,
  RememberOptions,
} from "./policy.js";
