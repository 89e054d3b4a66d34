import { EngineConfigError, knownKeys, readingConfig } from "./errors.js";
import type { Middleware } from "./middleware.js";
import { everyKey, meantOption, shownKey } from "../unknown-option.js";

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

/** In a compiled glob: `*`, any run of characters. */
const ANY_RUN = -1;
/** In a compiled glob: `?`, one character. */
const ANY_ONE = -2;

/** A glob as the code points it matches, `*` and `?` as {@link ANY_RUN} and {@link ANY_ONE}. */
function compileGlob(glob: string): readonly number[] {
  return [...glob].map((ch) => (ch === "*" ? ANY_RUN : ch === "?" ? ANY_ONE : (ch.codePointAt(0) as number)));
}

/** The index of the code point after the one at `i`. */
function nextCodePoint(text: string, i: number): number {
  const code = text.codePointAt(i) as number;
  return i + (code > 0xffff ? 2 : 1);
}

/**
 * Whether `glob` matches all of `text`, a character being a code point. Each
 * `*` takes one more character only when what follows it fails, and only the
 * last `*` is ever retried: time grows with the text times the glob, where a
 * backtracking RegExp of the same glob takes the square of a long text (an
 * argument the model wrote) and stalls the process.
 */
function globMatches(glob: readonly number[], text: string): boolean {
  let g = 0;
  let t = 0;
  /** Where the glob goes on after its last `*` met, and where in `text` that `*` stops for now. */
  let afterStar = -1;
  let starEnd = 0;
  while (t < text.length) {
    const want = glob[g];
    if (want === ANY_RUN) {
      g += 1;
      afterStar = g;
      starEnd = t;
    } else if (want !== undefined && (want === ANY_ONE || want === text.codePointAt(t))) {
      g += 1;
      t = nextCodePoint(text, t);
    } else if (afterStar !== -1) {
      starEnd = nextCodePoint(text, starEnd);
      g = afterStar;
      t = starEnd;
    } else {
      return false;
    }
  }
  while (glob[g] === ANY_RUN) g += 1;
  return g === glob.length;
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
    return /[*?]/.test(pattern) ? globMatches(compileGlob(pattern), value) : pattern === value;
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

/**
 * A checked copy of `pattern`, read once: what the rule holds when it is
 * made decides every call, whatever happens to the caller's objects later.
 */
function copyPattern(pattern: unknown, where: string): ArgPattern {
  if (pattern instanceof RegExp) return new RegExp(pattern.source, pattern.flags);
  if (pattern === null || ["string", "number", "boolean"].includes(typeof pattern)) return pattern as ArgPattern;
  if (isPlainObject(pattern)) {
    // No prototype: a key named `__proto__` (a rule read from JSON) stays a key to match, not a prototype to set.
    const copy = Object.create(null) as Record<string, ArgPattern>;
    for (const [key, sub] of Object.entries(pattern)) copy[key] = copyPattern(sub, `${where}.${key}`);
    return Object.freeze(copy);
  }
  throw new EngineConfigError("permissionMiddleware", `${where}: not a valid argument pattern`);
}

/** The rules as the middleware holds them: each checked, copied and compiled once. */
interface Rules {
  readonly compiled: readonly {
    readonly rule: PermissionRule;
    readonly pattern: string;
    readonly matches: (name: string, input: unknown) => boolean;
  }[];
  readonly defaultAction: "allow" | "deny";
}

/** The keys of a {@link PermissionRule}. */
const RULE_KEYS = everyKey<PermissionRule>()(["id", "action", "tool", "args"]);

function compileRules(options: PermissionOptions): Rules {
  // A misspelt `defaultAction`, ignored, would leave every call no rule matches denied, or allowed.
  knownKeys("permissionMiddleware", options, ["rules", "defaultAction"]);
  if (!isArray(options.rules)) throw new EngineConfigError("permissionMiddleware", "options.rules must be an array");
  const defaultAction = options.defaultAction ?? "deny";
  if (defaultAction !== "allow" && defaultAction !== "deny") {
    throw new EngineConfigError("permissionMiddleware", 'defaultAction must be "allow" or "deny"');
  }
  const seen = new Set<string>();
  const compiled = options.rules.map((rule, index) => {
    const where = `rules[${index}]`;
    if (typeof rule !== "object" || rule === null)
      throw new EngineConfigError("permissionMiddleware", `${where}: must be an object`);
    // A key no rule has is refused: ignored, a misspelt `tool` would leave a rule for every tool.
    for (const key of Object.keys(rule)) {
      if ((RULE_KEYS as readonly string[]).includes(key)) continue;
      const meant = meantOption(key, RULE_KEYS);
      throw new EngineConfigError(
        "permissionMiddleware",
        `${where}: unknown key ${shownKey(key)} (${meant === undefined ? "a rule's keys are id, action, tool and args" : `did you mean ${meant}?`})`,
      );
    }
    const { id, action, tool, args } = rule;
    if (typeof id !== "string" || id === "")
      throw new EngineConfigError("permissionMiddleware", `${where}: id must be a non-empty string`);
    if (seen.has(id) || id === "default") {
      throw new EngineConfigError("permissionMiddleware", `${where}: id ${shownKey(id)} is already used`);
    }
    seen.add(id);
    if (action !== "allow" && action !== "deny") {
      throw new EngineConfigError("permissionMiddleware", `${where}: action must be "allow" or "deny"`);
    }
    if (tool !== undefined && typeof tool !== "string" && !(tool instanceof RegExp)) {
      throw new EngineConfigError("permissionMiddleware", `${where}: tool must be a string or a RegExp`);
    }
    if (args !== undefined && !isPlainObject(args))
      throw new EngineConfigError("permissionMiddleware", `${where}: args must be an object of patterns`);
    const held: PermissionRule = {
      id,
      action,
      ...(tool === undefined ? {} : { tool: copyPattern(tool, `${where}.tool`) as string | RegExp }),
      ...(args === undefined
        ? {}
        : { args: copyPattern(args, `${where}.args`) as { readonly [key: string]: ArgPattern } }),
    };
    return {
      rule: held,
      pattern: describeRule(held),
      matches: (name: string, input: unknown): boolean =>
        (held.tool === undefined || matchesValue(held.tool, name)) &&
        (held.args === undefined || matchesValue(held.args, input)),
    };
  });

  return { compiled, defaultAction };
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
  // Options whose reads throw (a getter, a revoked proxy) are not rules either.
  const { compiled, defaultAction } = readingConfig("permissionMiddleware", "the options", () => compileRules(options));
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
        message: `Permission denied by rule '${ruleId}' for tool ${shownKey(call.name)}`,
      });
    }
    context.allow({ ruleId, matchedPattern, reason: null });
    return next();
  };
}
