export { NIL_UUID, PendingAskSchema, AskResolutionSchema } from "./types.js";
export type {
  AnswerOptions,
  AskEnding,
  AskInbox,
  WithdrawnReason,
  AskResolution,
  AskResolver,
  PendingAsk,
  RememberScope,
  ResolveOptions,
} from "./types.js";
export { askDigest } from "./ask-digest.js";
export { SyncAskResolver } from "./sync-resolver.js";
export type { SyncAskCallback } from "./sync-resolver.js";
export { ApprovalChannel } from "./approval-channel.js";
export { Approver } from "./approver.js";
export type { EndedOptions, NextOptions } from "./approver.js";
export { APPROVER_CLOSED_REASON, APPROVER_DROPPED_REASON } from "./channel-core.js";
export {
  ApproverConstructorError,
  AskCallbackError,
  DuplicateAskError,
  InvalidApproverOptionsError,
  InvalidAskCallbackError,
  InvalidAskResolutionError,
  InvalidCallPromptOptionsError,
  InvalidCapacityError,
  InvalidPendingAskError,
} from "./errors.js";
export { REDACTED, callPrompt, quoteForPrompt, redactSecretKeys } from "./call-prompt.js";
export type { ArgsPath, CallPromptOptions, Redactor } from "./call-prompt.js";
