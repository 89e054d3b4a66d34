import { ServerInputError } from "./errors.js";
import { shownText } from "../shown.js";

/** A user name and password, `//user:password@`, up to the last `@`: a password may hold a `/`. */
const USER_INFO = /\/\/.*@/s;

/**
 * `value`, a string or a `URL`, parsed as an http or https URL (a copy: the
 * caller's `URL` is never changed).
 * @throws {ServerInputError} naming `option` (`where` is the caller) for
 * anything else. A string that does not parse is repeated with any user name
 * and password masked: it may be a credentialed URL with a typo in it.
 */
export function httpUrl(where: string, option: string, value: unknown): URL {
  if (typeof value !== "string" && !(value instanceof URL)) {
    throw new ServerInputError(
      where,
      option,
      `must be a URL (a string or a URL object), got ${value === null ? "null" : typeof value}`,
    );
  }
  let url: URL;
  try {
    url = new URL(typeof value === "string" ? value : value.href);
  } catch {
    throw new ServerInputError(where, option, `is not a URL: ${shownText(String(value).replace(USER_INFO, "//***@"))}`);
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new ServerInputError(where, option, "must be an http or https URL");
  }
  return url;
}
