export { AuditSink } from "./sink.js";
export type { AuditAppend, AuditSinkOptions } from "./sink.js";
export { auditObserver } from "./observer.js";
export type { AuditObserver } from "./observer.js";
export { verifyAuditBytes, verifyAuditLog } from "./verify.js";
export type { AuditProblem, AuditVerifyOptions, AuditVerifyResult } from "./verify.js";
export {
  AUDIT_EMPTY_ANCHOR,
  AUDIT_GENESIS,
  formatAuditAnchor,
  parseAuditAnchor,
} from "./line.js";
export type { AuditAnchor } from "./line.js";
export {
  AuditAnchorError,
  AuditBusyError,
  AuditClosedError,
  AuditCorruptError,
  AuditIoError,
  AuditPathError,
  AuditRecordError,
} from "./errors.js";
export type { AuditError } from "./errors.js";
