import type { Tool, ToolExecutionOptions, ToolSet } from "ai";
import { everyKey, optionsProblem } from "../unknown-option.js";
import { z } from "zod";
import { callPrompt } from "../ask/index.js";
import { Gate, GateDecisionSchema } from "../engine/index.js";
import type { ArgumentCheck, GateDecision, Tool as GateTool, Hook, ToolDescriptor } from "../engine/index.js";
import { unlisten } from "../abort-signal.js";
import { describeError } from "../engine/errors.js";
import { callFor, checkChangedWith, hasMiddleware, refusedWith } from "../engine/gate.js";
import { approvedAllow } from "../engine/hooks.js";
import { frozenJson, isSnapshot, snapshot } from "../engine/snapshot.js";
import type { NotJson, Snapshot } from "../engine/snapshot.js";
import { compileJsonSchema } from "../engine/validation.js";
import { descriptorDigest, descriptorFingerprint } from "../grant/index.js";
import { shownValue } from "../errors.js";
import { AiSdkToolError, readOrRefuse } from "./errors.js";
import type { RefusalOutput } from "./prompt.js";

/**
 * What a gated tool's `execute` returns for a call the gate refused (a hook,
 * an approver, a grant, validation, a rule…): the refusal text the model
 * reads, and the gate's record. The model receives it as the SDK's
 * `execution-denied` output (see {@link GateToolsOptions.refusals}).
 */
export interface ToolRefusal {
  readonly type: "loopctl.refused";
  /** The text the model reads, e.g. `Permission denied by approver for tool 'deploy'`. */
  readonly message: string;
  /** The call's one gate record. */
  readonly record: GateDecision;
}

/** Options of {@link gateTools}. */
export interface GateToolsOptions {
  /** The session the calls belong to (asks and records carry it). @default the nil UUID */
  readonly sessionId?: string;
  /**
   * The run the calls belong to: loop detection counts per run, so give each
   * `generateText`/`streamText` its own (`gateTools` is cheap to call per run).
   * @default the nil UUID
   */
  readonly runId?: string;
  /**
   * How a refused call reaches the model: as the SDK's `execution-denied`
   * output whose reason is the refusal text, or as an `error-text` output.
   * @default "execution-denied"
   */
  readonly refusals?: RefusalOutput;
}

/** The tool set {@link gateTools} returns: the same tools, whose output may also be a {@link ToolRefusal}. */
export type GatedTools<TOOLS extends ToolSet> = {
  // The tool's own execute is left out: intersected with it, calls would pick its signature and
  // hide that a gated execute may resolve to a ToolRefusal.
  [K in keyof TOOLS]: TOOLS[K] extends Tool<infer INPUT, infer OUTPUT>
    ? Omit<TOOLS[K], "execute" | "toModelOutput"> & Tool<INPUT, OUTPUT | ToolRefusal>
    : TOOLS[K];
};

/** What a tool's `toModelOutput` returns (the SDK does not export the type by name). */
type ToolResultOutput = Awaited<ReturnType<NonNullable<Tool["toModelOutput"]>>>;

/** A tool's `toModelOutput`, as a gated tool calls it. */
type ModelOutputOf = (options: {
  toolCallId: string;
  input: unknown;
  output: unknown;
}) => ToolResultOutput | PromiseLike<ToolResultOutput>;

/**
 * What a gated `execute` was made for: the gate, the tool and the fields of
 * it the gated copy stands in front of, and the gated fields themselves.
 */
interface Origin {
  readonly gate: Gate;
  readonly tool: Tool;
  readonly execute: (input: unknown, options: ToolExecutionOptions) => unknown;
  readonly toModelOutput: ModelOutputOf | undefined;
  readonly outputSchema: Tool["outputSchema"];
  readonly gated: { readonly execute: unknown; readonly toModelOutput: unknown; readonly outputSchema?: unknown };
}

/**
 * The {@link Origin} of each `execute` {@link gateTools} made, by that
 * function: a tool carrying it (the gated copy, or an object spread from
 * it) is that gate's.
 */
const origins = new WeakMap<object, Origin>();

const refusals = new WeakSet<object>();

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The options {@link gateTools} takes; any other is refused, never ignored. */
const OPTIONS = everyKey<GateToolsOptions>()(["sessionId", "runId", "refusals"]);

/** Why a tool's `description` is not one the gate can show, if it is not: the SDK sends it to the model as text. */
function descriptionFault(description: unknown): string | undefined {
  return description === undefined || description === null || typeof description === "string"
    ? undefined
    : `description must be a string, got ${shownValue(description)}`;
}

/** `read()` of the tool set, a tool or the options; a getter that throws is an {@link AiSdkToolError} naming `tool`. */
function reading<T>(tool: string, what: string, read: () => T): T {
  return readOrRefuse(what, read, (message, options) => new AiSdkToolError(tool, message, options));
}

/**
 * Parses a {@link ToolRefusal} that crossed a process boundary as JSON: a
 * chat's UI messages carry a refused call's output to the browser and back,
 * where {@link isToolRefusal} (which trusts only the object the gate made)
 * no longer knows it.
 */
export const ToolRefusalSchema = z.strictObject({
  type: z.literal("loopctl.refused"),
  message: z.string(),
  record: GateDecisionSchema,
});

/** True for the output of a gated tool whose call the gate refused (the object itself, not a copy). */
export function isToolRefusal(value: unknown): value is ToolRefusal {
  return typeof value === "object" && value !== null && refusals.has(value);
}

/**
 * The refusal text of `output` when it is a refusal of a call to `tool`: the
 * gate's own object, or its JSON copy from stored or UI messages, which the
 * SDK converts again on the next request. A refusal of another tool's call
 * is not one: a tool that ran and handed back what another gated tool's
 * `execute` gave (a call it made itself) ran all the same.
 */
function refusalText(tool: string, output: unknown): string | undefined {
  if (isToolRefusal(output)) return output.record.tool === tool ? output.message : undefined;
  if (typeof output !== "object" || output === null || (output as { type?: unknown }).type !== "loopctl.refused")
    return undefined;
  const parsed = ToolRefusalSchema.safeParse(output);
  return parsed.success && parsed.data.record.tool === tool ? parsed.data.message : undefined;
}

/**
 * What the gate is handed for each tool object under each name it is gated
 * as, made once (its JSON Schema may be computed asynchronously): a run that
 * calls `gateTools` again hands the gate the same object, so the gate
 * prepares it once. Keyed by name too, since one tool object may sit under
 * two names, and the name is part of what a grant is pinned to. Each entry
 * remembers the fields it was made from, read from the gated tool the SDK
 * reads (not the tool handed to `gateTools`, which the gated one copied):
 * the SDK shows the model those fields as they are at each request, so a
 * gated tool changed in place (a new description, title or input schema) is
 * described again, and a grant pinned to the old descriptor no longer
 * matches it. So is a JSON Schema object edited in place (the object handed
 * to `jsonSchema()`, say): the SDK sends the model its JSON text as it is at
 * each request, so each call compares that text with the one described.
 */
interface Described extends Shown {
  readonly made: Promise<Made>;
  /** The tool of {@link made}: what each call with the same fields is handed. */
  readonly tool: Promise<GateTool | ToolDescriptor>;
  /** What {@link made} resolved to, once it has: a call compares its schema's text with it without waiting. */
  settled?: Made;
}

/** What {@link describe} made of a tool's fields. */
interface Made {
  readonly tool: GateTool | ToolDescriptor;
  /**
   * The JSON text of the JSON Schema described, as the SDK sends it; none
   * for a Standard Schema, which the gate validates with itself and the SDK
   * turns into JSON Schema afresh at each request.
   */
  readonly schemaText: string | undefined;
}

/**
 * The tool's own check, run once on a call's arguments (the gate's read of
 * them) before the gate sees them; the gate's validation takes its answer.
 * A Standard Schema's `validate` answers at once or as a promise; any other
 * schema's is the SDK's `validate`, awaited. A schema whose own check is
 * only asynchronous (`zodSchema()`, an async refinement) would otherwise be
 * checked by its JSON Schema, which Ajv may not compile (zod's `cuid`,
 * `e164`… formats): every call would be refused although the SDK's check
 * passed it. What an asynchronous check does not pass is checked by the
 * JSON Schema (`json`).
 */
interface Ahead {
  readonly check: (input: unknown) => ArgumentCheck | Promise<ArgumentCheck>;
  readonly json: (input: unknown) => ArgumentCheck;
}

/** The {@link Ahead} of each gate tool made for a schema with its own check. */
const aheadOf = new WeakMap<object, Ahead>();

/** The fields of a tool the model is shown, and the gate describes. */
interface Shown {
  readonly description: Tool["description"];
  readonly title: Tool["title"];
  readonly inputSchema: Tool["inputSchema"];
  /** A provider tool's `id` and `args`, as read at the call; none for any other tool. */
  readonly provider: JsonShown | undefined;
  /** The `inputExamples` the SDK sends with a tool that is not a provider tool, as read at the call; none without. */
  readonly examples: JsonShown | undefined;
}

/**
 * A field the SDK sends the model (a provider tool's `{ id, args }`, a
 * tool's `inputExamples`) as read at one call: a JSON copy and the sha256
 * of its canonical text (compared at each call, so one edited in place is
 * seen), or why it has no JSON form.
 */
type JsonShown = { readonly value: unknown; readonly argsSha256: string } | { readonly problem: string };

/**
 * The key of a provider tool's descriptor `annotations` that holds its `id`
 * and `args`: what the SDK gives the model for it, and what decides what it
 * does, so a grant's pin covers them.
 */
const PROVIDER_TOOL_ANNOTATION = "ai-sdk.providerTool";

/**
 * The key of a descriptor's `annotations` that holds a tool's
 * `inputExamples`: the SDK sends them to the model with the tool (a
 * provider that has no field for them gets them in the description, through
 * the SDK's `addToolInputExamplesMiddleware`), and they steer the calls the
 * model makes, so a grant's pin covers them.
 */
const INPUT_EXAMPLES_ANNOTATION = "ai-sdk.inputExamples";

/** `value` as a {@link JsonShown}. */
function jsonShown(value: unknown): JsonShown {
  const read = snapshot(value);
  return isSnapshot(read) ? { value: read.value, argsSha256: read.argsSha256 } : read;
}

/** The `id` and `args` of `tool` when it is a provider tool (`type: "provider"`), as the SDK reads them to send. */
function providerOf(name: string, tool: Tool, type: unknown): JsonShown | undefined {
  if (type !== "provider") return undefined;
  const provided = tool as { readonly id?: unknown; readonly args?: unknown };
  return jsonShown({ id: reading(name, "id", () => provided.id), args: reading(name, "args", () => provided.args) });
}

/** The `inputExamples` of `tool` when the SDK sends them: a tool that is not a provider tool, with some (not null). */
function examplesOf(name: string, tool: Tool, type: unknown): JsonShown | undefined {
  if (type === "provider") return undefined;
  const examples: unknown = reading(name, "inputExamples", () => tool.inputExamples);
  return examples === undefined || examples === null ? undefined : jsonShown(examples);
}

/** True when two reads of a field are the same JSON (one with none is never the same as one with some). */
function sameJson(a: JsonShown | undefined, b: JsonShown | undefined): boolean {
  if (a === undefined || b === undefined) return a === b;
  return "argsSha256" in a && "argsSha256" in b && a.argsSha256 === b.argsSha256;
}

const descriptors = new WeakMap<object, Map<string, Described>>();

type StandardIssue = {
  readonly message: string;
  readonly path?: readonly (PropertyKey | { readonly key: PropertyKey })[];
};
type StandardResult = { readonly value?: unknown; readonly issues?: readonly StandardIssue[] };

/** A Standard Schema (zod, valibot, ArkType, …): the SDK validates a tool's input with its own `validate`. */
interface StandardSchema {
  readonly "~standard": { readonly validate: (value: unknown) => StandardResult | PromiseLike<StandardResult> };
}

function isStandardSchema(schema: unknown): schema is StandardSchema {
  if (typeof schema !== "object" || schema === null || !("~standard" in schema)) return false;
  const standard = (schema as { "~standard"?: { validate?: unknown } })["~standard"];
  return typeof standard?.validate === "function";
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof value === "object" && value !== null && typeof (value as { then?: unknown }).then === "function";
}

function problemsOf(issues: readonly StandardIssue[]): string[] {
  return issues.map((issue) => {
    const path = (issue.path ?? []).map((segment) =>
      String(typeof segment === "object" && segment !== null ? segment.key : segment),
    );
    return `${["$", ...path].join(".")}: ${issue.message}`;
  });
}

/** The check of a descriptor's JSON Schema, compiled at its first use; one that does not compile refuses everything. */
function jsonSchemaCheck(descriptor: ToolDescriptor): (input: unknown) => ArgumentCheck {
  let json: ((input: unknown) => ArgumentCheck) | undefined;
  return (input) => {
    if (json === undefined) {
      try {
        json = compileJsonSchema(descriptor.inputSchema as Readonly<Record<string, unknown>>);
      } catch (error) {
        const problem = `the tool's input schema does not compile: ${describeError(error)}`;
        json = () => ({ type: "invalid", problems: [problem] });
      }
    }
    return json(input);
  };
}

/**
 * The gate's view of a tool whose input schema has a check of its own: the
 * descriptor the model was shown, validated by `ownCheck` when it answers
 * synchronously (a Standard Schema's `validate`: zod, valibot, ArkType, as
 * the SDK validates it; its JSON Schema may carry formats no JSON Schema
 * validator knows, such as zod's `cuid` or `e164`), else by its JSON Schema
 * (`byJsonSchema`). A call whose arguments the tool's check ran on ahead of
 * the gate ({@link Ahead}) hands the gate that answer instead.
 */
function checkedTool(
  descriptor: ToolDescriptor,
  ownCheck: ((input: unknown) => ArgumentCheck | Promise<ArgumentCheck>) | undefined,
  byJsonSchema: (input: unknown) => ArgumentCheck,
): GateTool {
  return Object.freeze({
    name: descriptor.name,
    descriptor,
    descriptorDigest: descriptorDigest(descriptor),
    descriptorFingerprint: descriptorFingerprint(descriptor),
    check(input: unknown): ArgumentCheck {
      const own = ownCheck?.(input);
      if (own === undefined) return byJsonSchema(input);
      if (!isThenable(own)) return own;
      // Only asynchronous: not waited for here (the check ahead of the gate waits for it).
      own.catch(() => {});
      return byJsonSchema(input);
    },
    execute(): never {
      // The gate runs the call through the execute handed to gate.call, never through this.
      throw new AiSdkToolError(descriptor.name, "runs only through its gated execute");
    },
  });
}

/**
 * A Standard Schema's own check, run once: its answer when it answers
 * synchronously; when it answers only asynchronously (an async
 * refinement), the promise of its answer as the SDK reads it (see
 * {@link sdkCheck}), which rejects when the schema's `validate` does.
 */
function standardCheck(schema: StandardSchema): (input: unknown) => ArgumentCheck | Promise<ArgumentCheck> {
  return (input) => {
    let result: StandardResult | PromiseLike<StandardResult>;
    try {
      result = schema["~standard"].validate(input);
    } catch (error) {
      return { type: "invalid", problems: [`$: ${describeError(error)}`] };
    }
    if (!isThenable(result)) {
      return result.issues === undefined
        ? { type: "valid", value: input }
        : { type: "invalid", problems: problemsOf(result.issues) };
    }
    return Promise.resolve(result).then((answer) =>
      answer.issues === undefined
        ? unchanged(input, answer.value)
        : { type: "invalid", problems: problemsOf(answer.issues) },
    );
  };
}

/**
 * Valid when the schema's output is `input` as it is (canonically): the SDK
 * runs a tool with its schema's output, and the gate runs exactly what was
 * approved, so only arguments the schema leaves as they are can be both (as
 * the SDK itself holds approved inputs to).
 */
function unchanged(input: unknown, output: unknown): ArgumentCheck {
  const made = snapshot(output);
  const given = snapshot(input);
  return isSnapshot(made) && isSnapshot(given) && made.argsSha256 === given.argsSha256
    ? { type: "valid", value: input }
    : CHANGED_BY_SCHEMA;
}

/**
 * The answer of a check that passed the arguments but would change them:
 * not a refusal of them (see {@link checkAhead}).
 */
const CHANGED_BY_SCHEMA: ArgumentCheck = Object.freeze({
  type: "invalid",
  problems: Object.freeze([
    "$: the tool's schema changes them (a default, a transform, a key it strips): give them as the schema makes them",
  ]),
});

/** The SDK's own check of a tool's input (`asSchema(inputSchema).validate`): it may answer only asynchronously. */
type SdkValidate = (value: unknown) => unknown;

/** The problems in what an SDK `validate` failed with: zod's issues, a Standard Schema's (its cause), or its message. */
function problemsOfFailure(error: unknown): string[] {
  const listed = (value: unknown): value is readonly StandardIssue[] =>
    Array.isArray(value) &&
    value.length > 0 &&
    value.every((issue) => typeof (issue as { message?: unknown } | null)?.message === "string");
  try {
    const { issues, cause } = (error ?? {}) as { issues?: unknown; cause?: unknown };
    if (listed(issues)) return problemsOf(issues);
    if (listed(cause)) return problemsOf(cause);
  } catch {
    // An error whose fields cannot be read is described by its message.
  }
  return [`$: ${describeError(error)}`];
}

/**
 * Checks arguments a hook's `modify` changed as the SDK checked the model's
 * before calling `execute`: with the tool's own `validate`, awaited, so an
 * async refinement or an async Standard Schema holds. A `validate` that
 * throws or rejects refuses them (the gate says why); so does an answer
 * that is neither a success nor a failure, and one whose output differs
 * from them (the tool would run with arguments its schema did not make).
 */
function sdkCheck(validate: SdkValidate): (input: unknown) => Promise<ArgumentCheck> {
  return async (input) => {
    const result = (await validate(input)) as
      { success?: unknown; value?: unknown; error?: unknown } | null | undefined;
    if (result?.success === true) return unchanged(input, result.value);
    if (result?.success === false) return { type: "invalid", problems: problemsOfFailure(result.error) };
    throw new TypeError("its validate answered neither success nor failure");
  };
}

/** The SDK's `asSchema`, once `describe` has loaded it (before any call compares a schema's text). */
let sdkAsSchema: ((schema: Tool["inputSchema"]) => { jsonSchema: unknown; validate?: unknown }) | undefined;

/** The JSON text of `value`, or undefined when it has none (which describes the tool again, and fails there). */
function jsonText(value: unknown): string | undefined {
  try {
    return JSON.stringify(value);
  } catch {
    return undefined;
  }
}

/**
 * True when the JSON Schema of `inputSchema`, as the SDK reads it at a
 * request, is still the one `made` was described from: compared by its JSON
 * text, which is what the SDK sends the model. A schema that cannot be read
 * is not the same (the tool is described again, and fails there).
 */
function sameSchema(made: Made, inputSchema: Tool["inputSchema"]): boolean | Promise<boolean> {
  if (made.schemaText === undefined) return true;
  let read: unknown;
  try {
    read = sdkAsSchema!(inputSchema).jsonSchema;
  } catch {
    return false;
  }
  if (!isThenable(read)) return jsonText(read) === made.schemaText;
  return Promise.resolve(read).then(
    (value) => jsonText(value) === made.schemaText,
    () => false,
  );
}

async function describe(name: string, tool: Shown): Promise<Made> {
  // Set on the gated tool since gateTools checked it: refused at the call, with its record, as gateTools refuses it.
  const badDescription = descriptionFault(tool.description);
  if (badDescription !== undefined) throw new AiSdkToolError(name, badDescription);
  let inputSchema: unknown;
  let validate: SdkValidate | undefined;
  let schemaText: string | undefined;
  const standard = isStandardSchema(tool.inputSchema);
  try {
    // The JSON Schema the model is shown, and the check of its input, made as generateText makes them.
    const { asSchema } = await import("ai");
    sdkAsSchema = asSchema as typeof sdkAsSchema;
    const schema = asSchema(tool.inputSchema) as { jsonSchema: unknown; validate?: unknown };
    const check = schema.validate;
    if (typeof check === "function") validate = (value) => check.call(schema, value);
    inputSchema = await schema.jsonSchema;
    // In the same turn as the descriptor below freezes the schema: both are of one and the same object state.
    if (!standard) schemaText = JSON.stringify(inputSchema);
  } catch (error) {
    throw new AiSdkToolError(name, "its input schema has no JSON Schema form", { cause: error });
  }
  const descriptor: {
    name: string;
    description: string;
    inputSchema: unknown;
    title?: string;
    annotations?: Record<string, unknown>;
  } = {
    name,
    description: tool.description ?? "",
    inputSchema,
  };
  if (typeof tool.title === "string") descriptor.title = tool.title;
  const { provider } = tool;
  if (provider !== undefined) {
    if ("problem" in provider)
      throw new AiSdkToolError(name, `its provider tool id and args are not JSON: ${provider.problem}`);
    // What the SDK gives the model for a provider tool (its description is not sent): the pin covers it.
    descriptor.annotations = { [PROVIDER_TOOL_ANNOTATION]: provider.value };
    // The ask names the provider tool (callPrompt shows the title) unless the tool has a title of its own.
    const { id } = provider.value as { id?: unknown };
    if (descriptor.title === undefined && typeof id === "string") descriptor.title = id;
  }
  const { examples } = tool;
  if (examples !== undefined) {
    if ("problem" in examples) throw new AiSdkToolError(name, `its inputExamples are not JSON: ${examples.problem}`);
    // Sent to the model with the tool: what they show it steers its calls, so the pin covers them.
    descriptor.annotations = { ...descriptor.annotations, [INPUT_EXAMPLES_ANNOTATION]: examples.value };
  }
  // Frozen now, not when the gate first reads it: the schema object may be edited in place meanwhile.
  let frozen: ToolDescriptor;
  try {
    frozen = frozenJson(descriptor);
  } catch (error) {
    throw new AiSdkToolError(name, `its descriptor is not JSON: ${describeError(error)}`, { cause: error });
  }
  // A schema without a check of its own (the SDK's jsonSchema() without validate) is JSON Schema to the gate,
  // which compiles it.
  if (validate === undefined && !standard) return { tool: frozen, schemaText };
  const own = standard ? standardCheck(tool.inputSchema as StandardSchema) : undefined;
  const json = jsonSchemaCheck(frozen);
  const described = checkedTool(frozen, own, json);
  if (validate === undefined) return { tool: described, schemaText };
  const check = sdkCheck(validate);
  aheadOf.set(described, { check: own ?? check, json });
  // A hook's changed arguments never met the SDK's check: the gate runs it on them before the call goes on.
  return { tool: checkChangedWith(described, check), schemaText };
}

/** The descriptor of `tool` as gated under `name`, made of the fields of `shown`, the gated copy the SDK reads. */
function descriptorOf(name: string, tool: Tool, shown: Tool): Promise<GateTool | ToolDescriptor> {
  let byName = descriptors.get(tool);
  if (byName === undefined) {
    byName = new Map();
    descriptors.set(tool, byName);
  }
  const known = byName.get(name);
  // Each read as an AiSdkToolError when a getter throws: the call is then refused with its record, not failed without one.
  const description = reading(name, "description", () => shown.description);
  const title = reading(name, "title", () => shown.title);
  const inputSchema = reading(name, "inputSchema", () => shown.inputSchema);
  const type: unknown = reading(name, "type", () => shown.type);
  const provider = providerOf(name, shown, type);
  const examples = examplesOf(name, shown, type);
  if (
    known !== undefined &&
    known.description === description &&
    known.title === title &&
    known.inputSchema === inputSchema &&
    sameJson(known.provider, provider) &&
    sameJson(known.examples, examples)
  ) {
    // The same schema object may hold another JSON Schema now (edited in place): the model is shown that one.
    const again = (): Promise<GateTool | ToolDescriptor> =>
      describedAgain(byName, name, { description, title, inputSchema, provider, examples });
    const { settled } = known;
    if (settled !== undefined) {
      const same = sameSchema(settled, inputSchema);
      if (same === true) return known.tool;
      if (same === false) return again();
      return same.then((yes) => (yes ? settled.tool : again()));
    }
    return known.made.then(async (made) => ((await sameSchema(made, inputSchema)) ? made.tool : again()));
  }
  return describedAgain(byName, name, { description, title, inputSchema, provider, examples });
}

function describedAgain(
  byName: Map<string, Described>,
  name: string,
  shown: Shown,
): Promise<GateTool | ToolDescriptor> {
  const made = describe(name, shown);
  const tool = made.then((it) => it.tool);
  const entry: Described = { ...shown, made, tool };
  made.then(
    (it) => {
      entry.settled = it;
    },
    () => {
      // A failure is not cached: the next call tries again (and is refused again if it fails again).
      if (byName.get(name) === entry) byName.delete(name);
    },
  );
  byName.set(name, entry);
  return tool;
}

/** The mark the AI SDK puts on its own schema objects (`jsonSchema()`, `zodSchema()`): global, so it holds across copies. */
const SCHEMA = Symbol.for("vercel.ai.schema");

type OutputSchema = NonNullable<Tool["outputSchema"]>;

type Validation = { success: true; value: unknown } | { success: false; error: Error };

/**
 * `outputSchema` that also accepts a refusal of a call to `tool`: a gated
 * tool's output may be a {@link ToolRefusal}, and the SDK checks stored and
 * UI messages against the output schema (`validateUIMessages`). Everything
 * else is checked by the tool's own schema, as the SDK checks it, and its
 * JSON Schema is the tool's own.
 */
function withRefusals(tool: string, outputSchema: OutputSchema): OutputSchema {
  const own = async (): Promise<{ jsonSchema: unknown; validate?: (value: unknown) => unknown }> => {
    const { asSchema } = await import("ai");
    return asSchema(outputSchema) as { jsonSchema: unknown; validate?: (value: unknown) => unknown };
  };
  return {
    [SCHEMA]: true,
    _type: undefined,
    get jsonSchema() {
      return own().then((schema) => schema.jsonSchema);
    },
    async validate(value: unknown): Promise<Validation> {
      if (refusalText(tool, value) !== undefined) return { success: true, value };
      const schema = await own();
      return schema.validate === undefined ? { success: true, value } : ((await schema.validate(value)) as Validation);
    },
  } as unknown as OutputSchema;
}

function isAsyncIterable(value: unknown): value is AsyncIterable<unknown> {
  return (
    typeof value === "object" &&
    value !== null &&
    typeof (value as { [Symbol.asyncIterator]?: unknown })[Symbol.asyncIterator] === "function"
  );
}

/** True for an `async *execute`: the SDK streams its yields as preliminary results, the last one being the output. */
function isAsyncGeneratorFunction(fn: unknown): boolean {
  return Object.prototype.toString.call(fn) === "[object AsyncGeneratorFunction]";
}

/**
 * Runs a streaming tool's iterable to its end inside the gate, handing each
 * value to `onValue` as it comes; its last value is the call's output (as
 * the SDK reads a streaming tool). A cancel stops it.
 */
async function drain(
  values: AsyncIterable<unknown>,
  signal: AbortSignal,
  onValue: (value: unknown) => void,
): Promise<unknown> {
  let last: unknown;
  for await (const value of values) {
    if (signal.aborted) break;
    last = value;
    onValue(value);
  }
  return last;
}

/** A property descriptor whose accessors are functions to call on an object of one's choosing. */
type Field = Omit<PropertyDescriptor, "get" | "set"> & {
  readonly get?: (this: unknown) => unknown;
  readonly set?: (this: unknown, value: unknown) => void;
};

/**
 * The properties of the gated copy of `tool`: its own, as they are, and
 * what needs `this` run on `tool` itself, as the SDK would run it on the
 * tool: its getters and setters, own or inherited, and the methods it
 * inherits (a class's `needsApproval`, say). A getter or method that reads
 * a `#private` field works only on the object whose class made it, never on
 * a copy. What it inherits otherwise stays inherited.
 */
function copiedFields(tool: object): PropertyDescriptorMap {
  const fields: PropertyDescriptorMap = {};
  for (
    let from: object | null = tool;
    from !== null && from !== Object.prototype;
    from = Object.getPrototypeOf(from) as object | null
  ) {
    const own = from === tool;
    for (const key of Reflect.ownKeys(from)) {
      if (Object.hasOwn(fields, key) || (!own && key === "constructor")) continue;
      const field = Object.getOwnPropertyDescriptor(from, key) as Field | undefined;
      if (field === undefined) continue;
      const { get, set } = field;
      if (get !== undefined || set !== undefined) {
        const accessor: PropertyDescriptor = { enumerable: field.enumerable ?? false, configurable: true };
        if (get !== undefined) accessor.get = () => get.call(tool);
        if (set !== undefined) accessor.set = (value: unknown) => set.call(tool, value);
        fields[key] = accessor;
      } else if (own) {
        fields[key] = field;
      } else if (typeof field.value === "function") {
        const method = field.value as (...args: unknown[]) => unknown;
        fields[key] = {
          value: (...args: unknown[]): unknown => method.apply(tool, args),
          writable: true,
          enumerable: field.enumerable ?? false,
          configurable: true,
        };
      }
    }
  }
  return fields;
}

/**
 * True when the SDK runs call `callId` because the chat's user approved it:
 * the last of the messages the SDK hands `execute` answers, with an
 * approval, an approval request for that call, and holds no result of it
 * (as the SDK itself reads approvals, from the last message only).
 */
function approvedInChat(messages: unknown, callId: string): boolean {
  if (!Array.isArray(messages)) return false;
  type Part = {
    readonly type?: unknown;
    readonly approvalId?: unknown;
    readonly approved?: unknown;
    readonly toolCallId?: unknown;
  };
  const parts = (message: unknown, role: string): readonly Part[] => {
    const { role: its, content } = (message ?? {}) as { role?: unknown; content?: unknown };
    return its === role && Array.isArray(content) ? (content as readonly Part[]) : [];
  };
  const list = messages as readonly unknown[];
  const approvals = new Set<unknown>();
  for (const part of parts(list.at(-1), "tool")) {
    if (part?.type === "tool-approval-response" && part.approved === true) approvals.add(part.approvalId);
    // The SDK skips an approval whose call has its result there already: it runs nothing on it, and a
    // later call under the same id (a model that numbers its calls anew) is not the call approved.
    if (part?.type === "tool-result" && part.toolCallId === callId) return false;
  }
  if (approvals.size === 0) return false;
  return list.some((message) =>
    parts(message, "assistant").some(
      (part) => part?.type === "tool-approval-request" && part.toolCallId === callId && approvals.has(part.approvalId),
    ),
  );
}

/**
 * What approved a call the chat's user approved with these arguments: its
 * record says so (`ai-sdk.needsApproval`), and on what it rests, the
 * messages the application handed the SDK (a chat's come from its client).
 * A call `needsApproval` let through unasked keeps the plain allow: nobody
 * approved it.
 */
const CHAT_APPROVED = {
  ruleId: "ai-sdk.needsApproval",
  reason: "approved in the chat: a tool-approval-response in the messages",
} as const;

/** The name of the approval hook of a tool with the SDK's own `needsApproval`: a record of its failure names it. */
const APPROVAL_HOOK = "ai-sdk:needsApproval";

/** A tool's `needsApproval` when it is a function, as the SDK calls it. */
type NeedsApproval = (
  input: unknown,
  options: { toolCallId: string; messages: unknown; experimental_context: unknown },
) => unknown;

/**
 * The approval hook of one call of a tool with the SDK's own
 * `needsApproval`, run after the gate's hooks whenever they allow or modify,
 * on the arguments the call goes on with. The SDK's approval (or its
 * `needsApproval` saying none was needed) was given for the arguments the
 * SDK runs the call with (`read`, as the gate read them): it covers those, compared
 * canonically, and nothing else. Arguments a hook's `modify` changed are
 * asked about as changed when the chat's user approved other ones, or when
 * the tool's `needsApproval` (`needsApproval`, as the call read it once)
 * wants them approved.
 */
function chatApproval(
  name: string,
  shown: Tool,
  needsApproval: unknown,
  read: Snapshot | NotJson,
  callOptions: ToolExecutionOptions,
): Hook {
  const { toolCallId, messages, experimental_context } = callOptions;
  const approved = approvedInChat(messages, toolCallId);
  // The gate's read of the arguments: without a JSON form, the gate refuses the call before any hook.
  const given = isSnapshot(read) ? read.argsSha256 : undefined;
  return {
    name: APPROVAL_HOOK,
    preToolUse: async (call, { descriptor }) => {
      const now = snapshot(call.input);
      if (isSnapshot(now) && now.argsSha256 === given)
        return approved ? approvedAllow(CHAT_APPROVED) : { type: "allow" };
      if (approved) {
        const notes = ["The chat's user approved this call with other arguments; a hook changed them to these."];
        return { type: "ask", prompt: callPrompt(descriptor, call.input, { notes }) };
      }
      // As the SDK asks it: a method of the tool it reads, on the arguments the call would run with. One that
      // throws or rejects fails this hook: the gate refuses the call, its record naming the tool and why.
      let wants: unknown;
      try {
        wants =
          typeof needsApproval === "function"
            ? await (needsApproval as NeedsApproval).call(shown, call.input, {
                toolCallId,
                messages,
                experimental_context,
              })
            : needsApproval;
      } catch (error) {
        throw new AiSdkToolError(name, `its needsApproval failed: ${describeError(error)}`, { cause: error });
      }
      // Read as the SDK reads the answer (a truthy one wants approval).
      if (!wants) return { type: "allow" };
      const notes = ["A hook changed this call's arguments to these, which the tool's needsApproval wants approved."];
      return { type: "ask", prompt: callPrompt(descriptor, call.input, { notes }) };
    },
  };
}

/**
 * Runs the tool's own check ({@link Ahead}) once on a call's arguments as
 * the gate read them, before the gate sees them: its answer is the gate's
 * validation of them. What it refuses is refused, and so is what it throws
 * or rejects on: a call of the gated `execute` that did not come through
 * the SDK's own check (or a check that answers otherwise now) never runs
 * with arguments the tool's schema refuses, whatever its JSON Schema
 * passes. Only arguments it passes but would change again (the SDK's output
 * of a schema whose transform is not idempotent) are answered by the JSON
 * Schema, as the gate would check it. A cancel while it runs answers
 * nothing: the gate ends the call cancelled.
 */
async function checkAhead(
  ahead: Ahead | undefined,
  read: Snapshot | NotJson,
  signal: AbortSignal | undefined,
): Promise<ArgumentCheck | undefined> {
  if (ahead === undefined || !isSnapshot(read) || signal?.aborted === true) return undefined;
  const answer = ahead.check(read.value);
  if (!isThenable(answer)) return answer;
  let onAbort: (() => void) | undefined;
  const cancelled = new Promise<undefined>((resolve) => {
    onAbort = () => resolve(undefined);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
  let checked: ArgumentCheck | undefined;
  try {
    checked = await Promise.race([answer, cancelled]);
    // Cut short by a cancel: the gate ends the call cancelled.
    if (checked === undefined) return undefined;
  } catch (error) {
    // A check that throws or rejects passes nothing, as the gate reads a check of changed arguments.
    return { type: "invalid", problems: [`$: the tool's input schema failed: ${describeError(error)}`] };
  } finally {
    if (onAbort !== undefined) unlisten(signal, onAbort);
  }
  return checked === CHANGED_BY_SCHEMA ? ahead.json(read.value) : checked;
}

/** The arguments a call a hook's `modify` changed ran with, and what it gave, for the tool's `toModelOutput`. */
interface RanWith {
  /** `argsSha256` of the arguments the SDK called `execute` with (the model's). */
  readonly given: string;
  readonly input: unknown;
  readonly output: unknown;
}

/** Calls per gated tool whose changed arguments {@link rememberRan} keeps (the least recent go first). */
const RAN_KEPT = 1024;

/**
 * Keeps the arguments call `callId` ran with when a hook's `modify` changed
 * them, so the tool's `toModelOutput` describes the call that ran; forgets
 * an earlier call of the same id (a model that numbers its calls anew).
 */
function rememberRan(
  modified: Map<string, RanWith>,
  callId: string,
  given: Snapshot | NotJson,
  ran: { readonly input: unknown } | undefined,
  output: unknown,
): void {
  modified.delete(callId);
  // The gate hands execute its own read of the arguments unless a hook's modify changed them.
  if (ran === undefined || !isSnapshot(given) || ran.input === given.value) return;
  const after = snapshot(ran.input);
  if (!isSnapshot(after) || given.argsSha256 === after.argsSha256) return;
  modified.set(callId, { given: given.argsSha256, input: ran.input, output });
  if (modified.size > RAN_KEPT) modified.delete(modified.keys().next().value as string);
}

/**
 * `options` for the tool's own `toModelOutput`, with the arguments the call
 * ran with when a hook's `modify` changed them (the SDK hands it the
 * model's): only for the result of that call, the same output of the same
 * model arguments.
 */
function withRanInput<T extends { readonly toolCallId: string; readonly input: unknown; readonly output: unknown }>(
  modified: Map<string, RanWith>,
  options: T,
): T {
  const ran = modified.get(options.toolCallId);
  if (ran === undefined || !Object.is(ran.output, options.output)) return options;
  const given = snapshot(options.input);
  return isSnapshot(given) && given.argsSha256 === ran.given ? { ...options, input: ran.input } : options;
}

/** What the SDK sends the model for an output when a tool has no `toModelOutput` of its own. */
function defaultModelOutput(output: unknown): ToolResultOutput {
  return typeof output === "string"
    ? { type: "text", value: output }
    : { type: "json", value: (output ?? null) as never };
}

/**
 * Puts loopctl's gate in front of every tool of an AI SDK `ToolSet` that
 * has an `execute`, for `generateText` and `streamText` loops: the same
 * tools, each `execute` passing through `gate.call` with the SDK's
 * `toolCallId` as `callId`, the SDK's parsed input as the arguments, and
 * the SDK's `abortSignal` as the call's signal. Hooks, grants, asks, rules
 * and records all apply; the tool runs only after the gate allowed it, with
 * the exact arguments approved.
 *
 * - A refused call does not throw: `execute` returns a {@link ToolRefusal},
 *   and the model reads its message as the SDK's `execution-denied` output
 *   (the tool's own `toModelOutput` handles every other output), also when
 *   the refusal comes back as JSON in stored or UI messages.
 * - A tool that throws throws as before (the SDK's `tool-error`); the gate's
 *   record says the call was allowed.
 * - A cancel (the SDK's `abortSignal`) rejects with `CancelledError` after
 *   the call's `cancelled` record: the step ends with that error. The SDK
 *   aborts that signal only when the application's `abortSignal` (or its
 *   `timeout`) does: a cancelled `streamText` stream aborts nothing, so abort
 *   `abortSignal` when the client goes away, or its asks stay parked.
 * - A streaming tool (`async *execute`) starts only once the gate allowed
 *   it and runs inside the gate: its yields reach the SDK as they come (the
 *   SDK's preliminary results), and its last value is the output. When the
 *   gate has middleware, which may refuse the output once the tool has run,
 *   the SDK gets only the output the middleware passed (no preliminary
 *   results). Another `execute` that returns an async iterable is run to its
 *   end inside the gate, its last value being the output.
 * - A tool's `outputSchema` also accepts the refusals of its calls (the SDK
 *   checks stored and UI messages against it); other outputs are checked by
 *   the tool's own schema.
 * - The gate validates the arguments with the tool's own schema when it is a
 *   Standard Schema (zod, valibot, ArkType), as the SDK does, else against
 *   its JSON Schema; a schema whose own check answers only asynchronously
 *   (`zodSchema()`, an async refinement) has it run, awaited, just before
 *   the gate, and what it passes is valid there. Arguments a hook's `modify` changed go through the
 *   tool's own check as the SDK runs it (its `validate`, awaited: an async
 *   refinement holds) before the call goes on; what it rejects, or a
 *   validator that throws, refuses the call as invalid arguments. The
 *   tool's own `toModelOutput` is handed the arguments the call ran with.
 * - Each tool's descriptor is made once per tool object and name, so calling
 *   `gateTools` per run costs no schema work after the first. A JSON Schema
 *   (not a Standard Schema) is compared by its JSON text at each call: one
 *   edited in place is described again, so the ask, the validation and the
 *   grant's pin follow what the SDK shows the model.
 * - A provider-defined tool (`type: "provider"`) with an `execute` is
 *   described with the `id` and `args` the SDK gives the model for it, read
 *   at each call (`annotations: { "ai-sdk.providerTool": { id, args } }`,
 *   and its `id` as title unless it has its own): another version or other
 *   `args` are asked about again.
 * - A tool's `inputExamples`, which the SDK sends the model with it, are
 *   part of its descriptor too, read at each call
 *   (`annotations: { "ai-sdk.inputExamples": [...] }`): other examples
 *   are asked about again.
 * - Tools without `execute` (client-side or provider-executed) are left as
 *   they are, and are not gated: their calls run in the client or at the
 *   provider, where no hook, ask, grant or record of the gate reaches them.
 *   A tool with the SDK's own `needsApproval` goes through the SDK's
 *   approval round trip first, then through the gate. The chat's approval
 *   covers only the arguments the user approved (compared canonically): a
 *   hook's `modify` that changes them is asked about as changed, through
 *   the gate's resolver (without one, the call is refused), as is one that
 *   makes a call `needsApproval` let through into one it wants approved. A
 *   call that runs on the chat's approval (no hook objected, the arguments
 *   those approved) is recorded `allow` with `ruleId: "ai-sdk.needsApproval"`
 *   and the reason `approved in the chat: a tool-approval-response in the
 *   messages`: it rests on the messages the application passed. The
 *   gate reads `needsApproval` once per call; a getter that throws then, or
 *   a `needsApproval` that throws or rejects on arguments a hook changed,
 *   fails the approval hook: the call is refused (`deny`, `hook`), its
 *   record naming the tool and why, and never runs.
 * - A gated tool is a copy of the tool on its prototype; its getters,
 *   setters and inherited methods run on the tool itself, so a class whose
 *   members read `#private` fields works as without the gate.
 *
 * @throws {AiSdkToolError} when `gate` is not a `Gate`, `tools` is not an
 *   object of tools (an array, a `Map` or a `Set`), a tool is not an object
 *   or has an `execute` or `toModelOutput` that is not a function, a tool
 *   with an `execute` has an empty name or a `description` that is not a
 *   string, an option is malformed, or `options` holds one it does not take
 *   (a misspelt `runId`; never ignored); and (from a gated `execute`) when
 *   the SDK calls it without a `toolCallId`, or its input schema has no JSON
 *   Schema form, or a provider tool's `id` and `args` or a tool's
 *   `inputExamples` have no JSON form (or cannot be read), or
 *   its `description` was set to something that is not a string (the call is
 *   refused through the gate first, so its one `deny` record lands; the tool
 *   does not run).
 *
 * @example
 * ```ts
 * const gate = new Gate(new LoopManagers().withHook(guard).withAskResolver(channel).withGrantStore(store));
 * const result = await generateText({ model, tools: gateTools({ deploy, readFile }, gate), prompt, stopWhen: stepCountIs(5) });
 * ```
 */
export function gateTools<TOOLS extends ToolSet>(
  tools: TOOLS,
  gate: Gate,
  options: GateToolsOptions = {},
): GatedTools<TOOLS> {
  if (!(gate instanceof Gate)) throw new AiSdkToolError("*", "gateTools needs a Gate (new Gate(managers))");
  if (typeof tools !== "object" || tools === null)
    throw new AiSdkToolError("*", "tools must be an AI SDK ToolSet (an object of tools)");
  if (Array.isArray(tools))
    throw new AiSdkToolError("*", "tools must be an AI SDK ToolSet: an object of tools, not an array");
  // Neither holds its tools as its own keys, where the SDK looks them up by name.
  if (tools instanceof Map || tools instanceof Set)
    throw new AiSdkToolError(
      "*",
      `tools must be an AI SDK ToolSet: an object of tools, not ${tools instanceof Map ? "a Map" : "a Set"}`,
    );
  // A misspelt runId, ignored, would count every run's calls under the nil run.
  const wrong = optionsProblem(options, OPTIONS);
  if (wrong !== undefined) {
    const problem = wrong.key === undefined ? `options ${wrong.problem}` : wrong.problem;
    throw new AiSdkToolError("*", problem, "cause" in wrong ? { cause: wrong.cause } : undefined);
  }
  const { sessionId, runId, mode } = reading("*", "options", () => {
    const { sessionId, runId, refusals = "execution-denied" } = options;
    return { sessionId, runId, mode: refusals };
  });
  if (mode !== "execution-denied" && mode !== "error-text")
    throw new AiSdkToolError("*", `refusals must be "execution-denied" or "error-text", got ${shownValue(mode)}`);
  for (const [option, id] of [
    ["sessionId", sessionId],
    ["runId", runId],
  ] as const) {
    if (id !== undefined && (typeof id !== "string" || !UUID.test(id)))
      throw new AiSdkToolError("*", `${option} must be a UUID, got ${typeof id === "string" ? id : typeof id}`);
  }
  // Middleware sees a streaming tool's output only once the tool has ended, and may refuse it then:
  // no value may reach the SDK (and the UI) before that.
  const preliminary = !hasMiddleware(gate);
  // No prototype: a tool named `__proto__` is a key like any other, and a
  // model's call to `constructor` or `toString` finds no tool.
  const gated = Object.create(null) as Record<string, Tool>;
  for (const [name, given] of reading("*", "the tool set", () => Object.entries(tools as Record<string, Tool>))) {
    if (typeof given !== "object" || given === null)
      throw new AiSdkToolError(
        name,
        `not an AI SDK tool (an object from tool()), got ${given === null ? "null" : typeof given}`,
      );
    // A tool this gate gated already (a set made once, gated again per run; a gated tool spread into one
    // of your own): gated again from the tool it was made of, so the gate decides each call once, with
    // these options. Another gate's stays in front.
    const carried: unknown = reading(name, "execute", () => given.execute);
    const origin = typeof carried === "function" ? origins.get(carried) : undefined;
    const again = origin !== undefined && origin.gate === gate;
    /** The tool itself: what `execute` and `toModelOutput` run on, and what its descriptor is made for. */
    const tool = again ? origin.tool : given;
    const execute = (again ? origin.execute : carried) as
      ((input: unknown, options: ToolExecutionOptions) => unknown) | null | undefined;
    // The SDK treats a null execute as none: such a tool is the client's or the provider's to run.
    if (execute === undefined || execute === null) {
      gated[name] = given;
      continue;
    }
    if (typeof execute !== "function") throw new AiSdkToolError(name, "execute must be a function");
    // The gate names every call's tool and record: a tool without a name could only fail at each call, unrecorded.
    if (name === "") throw new AiSdkToolError(name, "a tool's name must not be empty (the key it has in the tool set)");
    const badDescription = descriptionFault(reading(name, "description", () => given.description));
    if (badDescription !== undefined) throw new AiSdkToolError(name, badDescription);
    const givenModelOutput: unknown = reading(name, "toModelOutput", () => given.toModelOutput);
    const ownModelOutput: unknown =
      again && givenModelOutput === origin.gated.toModelOutput ? origin.toModelOutput : givenModelOutput;
    if (ownModelOutput !== undefined && typeof ownModelOutput !== "function")
      throw new AiSdkToolError(name, "toModelOutput must be a function");
    const toModelOutput = ownModelOutput as ModelOutputOf | undefined;
    const givenOutputSchema = reading(name, "outputSchema", () => given.outputSchema);
    const outputSchema =
      again && givenOutputSchema === origin.gated.outputSchema ? origin.outputSchema : givenOutputSchema;
    // The arguments each call a hook's modify changed ran with, by toolCallId: the SDK hands toModelOutput
    // the model's, and the model must read of the call that ran.
    const modified = new Map<string, RanWith>();
    /** One call through the gate: the tool's output, or a {@link ToolRefusal}; a failure throws the tool's error. */
    const run = async (
      input: unknown,
      callOptions: ToolExecutionOptions,
      onValue: (value: unknown) => void,
    ): Promise<unknown> => {
      const callId = callOptions?.toolCallId;
      if (typeof callId !== "string") throw new AiSdkToolError(name, "called without a toolCallId");
      let refusal: AiSdkToolError | undefined;
      // The fields the model was shown: the gated copy's, which the SDK reads (changes to `tool` do not reach it).
      let descriptor: GateTool | ToolDescriptor;
      try {
        descriptor = await descriptorOf(name, tool, shown);
      } catch (error) {
        if (!(error instanceof AiSdkToolError)) throw error;
        // Refused as the gate refuses any call, so its one record lands (and observers see it), then thrown.
        descriptor = refusedWith(
          { name, description: "", inputSchema: {} },
          `gateTools refused the call: ${error.message}`,
        );
        refusal = error;
      }
      const request = {
        tool: descriptor,
        callId,
        input,
        ...(callOptions.abortSignal === undefined ? {} : { signal: callOptions.abortSignal }),
        ...(sessionId === undefined ? {} : { sessionId }),
        ...(runId === undefined ? {} : { runId }),
      };
      let ran: { readonly input: unknown } | undefined;
      const runApproved = (approved: unknown, { signal }: { readonly signal: AbortSignal }): unknown => {
        ran = { input: approved };
        const result = execute.call(tool, approved, { ...callOptions, abortSignal: signal });
        // A streaming tool runs here, after the gate allowed it, not when the SDK reads the result.
        return isAsyncIterable(result) ? drain(result, signal, onValue) : result;
      };
      // Read once, as the SDK reads it, from the tool it runs: a tool with its own approval round trip. A getter
      // that throws now cannot say whether the call wants approval: the approval hook fails, and the gate refuses
      // the call with its record.
      let needsApproval: unknown;
      let unreadable: Error | undefined;
      try {
        needsApproval = reading(name, "needsApproval", () => shown.needsApproval);
      } catch (error) {
        // An AiSdkToolError naming the tool, or a loopctl error the getter threw.
        unreadable = error as Error;
      }
      // The gate's one read of the arguments: the tool's own check, the approval hook and the record all go on with it.
      const read = snapshot(input);
      const checked = await checkAhead(aheadOf.get(descriptor), read, callOptions.abortSignal);
      const approvalHook: Hook | undefined =
        unreadable !== undefined
          ? {
              name: APPROVAL_HOOK,
              preToolUse: () => {
                throw unreadable;
              },
            }
          : needsApproval === undefined || needsApproval === null || needsApproval === false
            ? undefined
            : chatApproval(name, shown, needsApproval, read, callOptions);
      const outcome = await callFor(gate, request, runApproved, { approvalHook, read, checked });
      if (refusal !== undefined) throw refusal;
      switch (outcome.type) {
        case "ran":
          rememberRan(modified, callId, read, ran, outcome.output);
          return outcome.output;
        case "failed":
          throw outcome.error;
        case "refused": {
          const refusal: ToolRefusal = Object.freeze({
            type: "loopctl.refused",
            message: outcome.message,
            record: outcome.record,
          });
          refusals.add(refusal);
          return refusal;
        }
      }
    };
    const ignore = (): void => {};
    const streams = preliminary && isAsyncGeneratorFunction(execute);
    const gatedFields = {
      ...(outputSchema == null ? {} : { outputSchema: withRefusals(name, outputSchema) }),
      execute: streams
        ? async function* (input: unknown, callOptions: ToolExecutionOptions): AsyncGenerator<unknown, void> {
            // The tool's yields reach the SDK as they come (its preliminary results); the last is its output.
            const values: unknown[] = [];
            let wake: (() => void) | undefined;
            let settled = false;
            const ending = run(input, callOptions, (value) => {
              values.push(value);
              wake?.();
            }).finally(() => {
              settled = true;
              wake?.();
            });
            ending.catch(ignore);
            let last: unknown;
            for (;;) {
              while (values.length > 0) yield (last = values.shift());
              if (settled) break;
              await new Promise<void>((resolve) => (wake = resolve));
              wake = undefined;
            }
            const output = await ending;
            if (output !== last) yield output;
          }
        : (input: unknown, callOptions: ToolExecutionOptions): Promise<unknown> => run(input, callOptions, ignore),
      toModelOutput(modelOptions: {
        toolCallId: string;
        input: unknown;
        output: unknown;
      }): ToolResultOutput | PromiseLike<ToolResultOutput> {
        const refused = refusalText(name, modelOptions.output);
        if (refused !== undefined) {
          return mode === "execution-denied"
            ? { type: "execution-denied", reason: refused }
            : { type: "error-text", value: refused };
        }
        const { output } = modelOptions;
        if (toModelOutput === undefined) return defaultModelOutput(output);
        // On the tool, as the SDK calls it (a method may read `this`), as `execute` is.
        return toModelOutput.call(tool, withRanInput(modified, modelOptions));
      },
    };
    // On the tool's own prototype, with what it inherits: a spread would drop a class's needsApproval,
    // and the call would skip the SDK's round trip.
    // Copied from the tool handed in: a gated copy keeps what was set on it since.
    const fields = copiedFields(given);
    for (const [key, value] of Object.entries(gatedFields))
      fields[key] = { value, writable: true, enumerable: true, configurable: true };
    const shown = Object.create(Object.getPrototypeOf(given) as object | null, fields) as Tool;
    origins.set(gatedFields.execute, { gate, tool, execute, toModelOutput, outputSchema, gated: gatedFields });
    gated[name] = shown;
  }
  return gated as GatedTools<TOOLS>;
}
