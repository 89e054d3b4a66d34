export { AuditSink } from "./sink.js";
export type { AuditAppend, AuditSinkOptions } from "./sink.js";
export { auditObserver } from "./observer.js";
export type { AuditObserver } from "./observer.js";
export { verifyAuditBytes, verifyAuditLog } from "./verify.js";
export type { AuditProblem, AuditVerifyBytesOptions, AuditVerifyOptions, AuditVerifyResult } from "./verify.js";
export { AUDIT_KEY_MIN_BYTES, readAuditKeyFile } from "./key.js";
export type { AuditKey } from "./key.js";
export { auditSealPath } from "./seal.js";
export {
  AUDIT_EMPTY_ANCHOR,
  AUDIT_GENESIS,
  AUDIT_LINE_MAX_BYTES,
  formatAuditAnchor,
  parseAuditAnchor,
} from "./line.js";
export type { AuditAnchor } from "./line.js";
export {
  AuditAnchorError,
  AuditBusyError,
  AuditClosedError,
  AuditConfigError,
  AuditCorruptError,
  AuditIoError,
  AuditKeyError,
  AuditLockError,
  AuditPathError,
  AuditRecordError,
} from "./errors.js";
export type { AuditError } from "./errors.js";
