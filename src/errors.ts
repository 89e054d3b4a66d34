/**
 * The base class of every error loopctl throws on purpose.
 *
 * `code` is stable across releases and safe to switch on; `message` names the
 * file, id or tool at fault and may be reworded.
 */
export class LoopctlError extends Error {
  /** A stable, machine-readable identifier such as `"LEDGER_CORRUPT"`. */
  readonly code: string;

  constructor(code: string, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}
