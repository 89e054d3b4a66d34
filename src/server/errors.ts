import { LoopctlError } from "../errors.js";

/**
 * An option given to the approval server, its request handler or a record
 * source is unusable (a short token, a wildcard host without `allowedHosts`,
 * a weak link secret…), or one given as an object breaks its contract while
 * the server runs (an approver handing out something that is not a
 * `PendingAsk`, a record source answering something that is not a list of
 * records, or records it cannot read), which `onError` is told. `code` is `"SERVER_CONFIG_INVALID"`;
 * `option` names the option at fault.
 */
export class ServerConfigError extends LoopctlError {
  /** The option at fault, e.g. `"token"`. */
  readonly option: string;

  constructor(option: string, message: string, options?: ErrorOptions) {
    super("SERVER_CONFIG_INVALID", `approval server option ${option}: ${message}`, options);
    this.option = option;
  }
}

/**
 * {@link signAnswerLink}, {@link WebhookResolver} or
 * {@link verifyWebhookSignature} was given unusable input (no ask id, a
 * short secret, a base URL that is not http(s), a ttl that is not a positive
 * integer, a NaN tolerance…). `code` is `"SERVER_INPUT_INVALID"`; `option`
 * names the input at fault.
 */
export class ServerInputError extends LoopctlError {
  /** The input at fault, e.g. `"secret"`. */
  readonly option: string;

  /** `message` says what is wrong with `option`; `whole`, when given, is the error's message as it stands. */
  constructor(where: string, option: string, message: string, whole = `${where}: ${option} ${message}`) {
    super("SERVER_INPUT_INVALID", whole);
    this.option = option;
  }
}

/**
 * The approval server could not listen on its host and port (in use,
 * not permitted, no such address). `code` is `"SERVER_LISTEN_FAILED"`; the
 * system error is the `cause`.
 */
export class ServerListenError extends LoopctlError {
  /** The address it tried, `host:port`. */
  readonly address: string;

  constructor(address: string, options?: ErrorOptions) {
    const detail = (options?.cause as { code?: unknown } | undefined)?.code;
    super(
      "SERVER_LISTEN_FAILED",
      `approval server cannot listen on ${address}${typeof detail === "string" ? ` (${detail})` : ""}`,
      options,
    );
    this.address = address;
  }
}

/**
 * The approval server met one of its limits, and what went over it was
 * refused (told to `onError`; nothing is answered for it): a connection
 * closed unread because `maxConnections` were open. `code` is
 * `"SERVER_LIMIT_REACHED"`; `limit` names the option, e.g. `"maxConnections"`.
 */
export class ServerLimitError extends LoopctlError {
  /** The option whose limit was reached, e.g. `"maxConnections"`. */
  readonly limit: string;

  constructor(limit: string, message: string) {
    super("SERVER_LIMIT_REACHED", message);
    this.limit = limit;
  }
}

/**
 * A {@link WebhookResolver} could not deliver an ask: the webhook answered
 * other than 2xx, could not be reached, did not answer within `timeoutMs`, or
 * no delivery could be made (a clock giving no epoch ms). `resolve` rejects
 * with it, so the engine ends the call as a failed resolver (an `ask_denied`
 * record with reason `ask resolver failed: <message>`), never as a person's
 * denial. `code` is `"WEBHOOK_DELIVERY_FAILED"`; `message` names the
 * webhook's host (never its path or query, which may hold a secret) and says
 * what failed, e.g. `webhook at hooks.example.com answered HTTP 500`.
 */
export class WebhookDeliveryError extends LoopctlError {
  constructor(message: string, options?: ErrorOptions) {
    super("WEBHOOK_DELIVERY_FAILED", message, options);
  }
}
