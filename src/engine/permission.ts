import { EngineConfigError } from "./errors.js";
import type { Middleware } from "./middleware.js";

/**
 * A pattern for one argument value: a string (a glob where `*` matches any
 * run of characters and `?` one character; no wildcard means equality), a
 * RegExp (tested against strings), a number/boolean/null (equality), or a
 * nested object of patterns (matched against a nested object).
 */
export type ArgPattern = string | RegExp | number | boolean | null | { readonly [key: string]: ArgPattern };

/** One permission rule. A rule matches when its `tool` and every key of its `args` match. */
export interface PermissionRule {
  /** Recorded as the record's `ruleId`; unique within the middleware. */
  readonly id: string;
  readonly action: "allow" | "deny";
  /** Tool name: exact, glob (`fs_*`) or RegExp. Omitted: any tool. */
  readonly tool?: string | RegExp;
  /** Patterns for top-level argument keys; every one must match. Omitted: any arguments. */
  readonly args?: { readonly [key: string]: ArgPattern };
}

/** Options of {@link permissionMiddleware}. */
export interface PermissionOptions {
  /** Checked in order; the first matching rule decides. */
  readonly rules: readonly PermissionRule[];
  /**
   * What happens when no rule matches.
   * @default "deny"
   */
  readonly defaultAction?: "allow" | "deny";
}

function globToRegExp(glob: string): RegExp {
  const body = [...glob]
    .map((ch) => (ch === "*" ? ".*" : ch === "?" ? "." : ch.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")))
    .join("");
  return new RegExp(`^${body}$`, "su");
}

/** `Array.isArray` narrows a typed array to `any[]`; this keeps its element type. */
function isArray(value: unknown): value is readonly unknown[] {
  return Array.isArray(value);
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof RegExp);
}

function matchesValue(pattern: ArgPattern, value: unknown): boolean {
  if (pattern instanceof RegExp) {
    if (typeof value !== "string") return false;
    pattern.lastIndex = 0;
    return pattern.test(value);
  }
  if (typeof pattern === "string") {
    if (typeof value !== "string") return false;
    return /[*?]/.test(pattern) ? globToRegExp(pattern).test(value) : pattern === value;
  }
  if (isPlainObject(pattern)) {
    if (!isPlainObject(value)) return false;
    return Object.entries(pattern).every(([key, sub]) => Object.hasOwn(value, key) && matchesValue(sub, value[key]));
  }
  return pattern === value;
}

function describePattern(pattern: ArgPattern): string {
  if (pattern instanceof RegExp) return pattern.toString();
  if (isPlainObject(pattern)) {
    return `{${Object.entries(pattern)
      .map(([key, sub]) => `${JSON.stringify(key)}:${describePattern(sub)}`)
      .join(",")}}`;
  }
  return JSON.stringify(pattern);
}

function describeRule(rule: PermissionRule): string {
  const tool = rule.tool === undefined ? "*" : rule.tool instanceof RegExp ? rule.tool.toString() : rule.tool;
  return rule.args === undefined ? tool : `${tool} ${describePattern(rule.args)}`;
}

function checkPattern(pattern: unknown, where: string): void {
  if (pattern instanceof RegExp || pattern === null) return;
  if (["string", "number", "boolean"].includes(typeof pattern)) return;
  if (isPlainObject(pattern)) {
    for (const [key, sub] of Object.entries(pattern)) checkPattern(sub, `${where}.${key}`);
    return;
  }
  throw new EngineConfigError("permissionMiddleware", `${where}: not a valid argument pattern`);
}

/**
 * Allow/deny rules by tool name and argument pattern, as dispatch middleware.
 * It runs after the park, so it holds whatever a human approved: a `deny`
 * refuses an approved call, and its record displaces the approval record.
 * Each decision is recorded with `ruleSource: "middleware"`, `ruleId` the
 * rule's id (`"default"` when no rule matched) and `matchedPattern` the rule's
 * pattern. The model receives `Permission denied by rule '<id>' for tool '<tool>'`.
 *
 * @throws {EngineConfigError} on a rule without an id, a duplicate id, an
 *   unknown action or an invalid pattern.
 *
 * @example
 * ```ts
 * const rules = permissionMiddleware({
 *   rules: [
 *     { id: "no-etc", tool: "write_file", args: { path: "/etc/*" }, action: "deny" },
 *     { id: "fs", tool: "*_file", action: "allow" },
 *   ],
 *   defaultAction: "deny",
 * });
 * ```
 */
export function permissionMiddleware(options: PermissionOptions): Middleware {
  if (typeof options !== "object" || options === null || !isArray(options.rules)) {
    throw new EngineConfigError("permissionMiddleware", "options.rules must be an array");
  }
  const defaultAction = options.defaultAction ?? "deny";
  if (defaultAction !== "allow" && defaultAction !== "deny") {
    throw new EngineConfigError("permissionMiddleware", 'defaultAction must be "allow" or "deny"');
  }
  const seen = new Set<string>();
  const compiled = options.rules.map((rule, index) => {
    const where = `rules[${index}]`;
    if (typeof rule !== "object" || rule === null)
      throw new EngineConfigError("permissionMiddleware", `${where}: must be an object`);
    if (typeof rule.id !== "string" || rule.id === "")
      throw new EngineConfigError("permissionMiddleware", `${where}: id must be a non-empty string`);
    if (seen.has(rule.id) || rule.id === "default") {
      throw new EngineConfigError("permissionMiddleware", `${where}: id '${rule.id}' is already used`);
    }
    seen.add(rule.id);
    if (rule.action !== "allow" && rule.action !== "deny") {
      throw new EngineConfigError("permissionMiddleware", `${where}: action must be "allow" or "deny"`);
    }
    if (rule.tool !== undefined && typeof rule.tool !== "string" && !(rule.tool instanceof RegExp)) {
      throw new EngineConfigError("permissionMiddleware", `${where}: tool must be a string or a RegExp`);
    }
    if (rule.args !== undefined) {
      if (!isPlainObject(rule.args))
        throw new EngineConfigError("permissionMiddleware", `${where}: args must be an object of patterns`);
      checkPattern(rule.args, `${where}.args`);
    }
    const toolPattern: ArgPattern | undefined = rule.tool;
    return {
      rule: { ...rule },
      pattern: describeRule(rule),
      matches: (tool: string, input: unknown): boolean =>
        (toolPattern === undefined || matchesValue(toolPattern, tool)) &&
        (rule.args === undefined || matchesValue(rule.args, input)),
    };
  });

  return (call, context, next) => {
    const hit = compiled.find((entry) => entry.matches(call.name, call.input));
    const action = hit?.rule.action ?? defaultAction;
    const ruleId = hit?.rule.id ?? "default";
    const matchedPattern = hit?.pattern ?? null;
    if (action === "deny") {
      return context.deny({
        ruleId,
        matchedPattern,
        reason: `denied by rule '${ruleId}'`,
        message: `Permission denied by rule '${ruleId}' for tool '${call.name}'`,
      });
    }
    context.allow({ ruleId, matchedPattern, reason: null });
    return next();
  };
}
