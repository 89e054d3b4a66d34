import type { z } from "zod";

/**
 * A zod error as one line for a person: each issue's path and message,
 * `tool: Invalid input: expected string, received number; verdict: …`, the
 * first `max` of them. Messages are collapsed to one line, so an error that
 * quotes this stays one line in a log or a terminal.
 */
export function zodIssuesLine(error: z.ZodError, max = 3): string {
  const shown = error.issues.slice(0, max).map((issue) => {
    const message = issue.message.replace(/\s+/g, " ").trim();
    return issue.path.length === 0 ? message : `${issue.path.map(String).join(".")}: ${message}`;
  });
  const more = error.issues.length - shown.length;
  return `${shown.join("; ")}${more > 0 ? `; and ${more} more` : ""}`;
}
