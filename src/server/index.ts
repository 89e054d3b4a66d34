/**
 * `loopctl/server`: approvals across processes. An HTTP API and a console
 * in the browser over any approver (`createApprovalServer`,
 * `createApprovalHandler`), signed answer links for chat and mail
 * (`signAnswerLink`), and a resolver that sends asks to a webhook and takes
 * the answers back through the server (`WebhookResolver`).
 *
 * @packageDocumentation
 */
export { createApprovalServer } from "./approval-server.js";
export type { ApprovalServer, ApprovalServerOptions } from "./approval-server.js";
export { createApprovalHandler } from "./handler.js";
export type { ApprovalHandler, ApprovalHandlerOptions, AskView } from "./handler.js";
export type { GrantView } from "./grant-view.js";
export { RecentRecords } from "./records.js";
export type {
  AuditLogCheck,
  AuditedRecord,
  AuditedRecords,
  RecentRecordsOptions,
  RecordSource,
  RecordVouch,
} from "./records.js";
export { auditLogRecords } from "./audit-records.js";
export type { AuditLogRecordSource, AuditLogRecordsOptions } from "./audit-records.js";
export { signAnswerLink } from "./answer-links.js";
export type { AnswerLinkOptions, AnswerLinks } from "./answer-links.js";
export {
  WEBHOOK_SIGNATURE_HEADER,
  WEBHOOK_TOLERANCE_MS,
  WebhookDeliverySchema,
  WebhookResolver,
  verifyWebhookSignature,
} from "./webhook-resolver.js";
export type { VerifyWebhookOptions, WebhookDelivery, WebhookResolverOptions } from "./webhook-resolver.js";
export { CONTENT_SECURITY_POLICY } from "./http.js";
export {
  ServerConfigError,
  ServerInputError,
  ServerLimitError,
  ServerListenError,
  WebhookDeliveryError,
} from "./errors.js";
