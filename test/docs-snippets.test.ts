import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

// Every ts block of the README and docs/ type-checked against the current API
// with the project's compiler settings, so a renamed export, option, field or
// method on a page fails here. Blocks are excerpts: a name a block uses without
// importing it is imported from the loopctl module that exports it, and any
// other free name is declared with the type the pages give it (DECLARED: a
// value a page made earlier, such as `approver` or `gate`), so a call on it is
// checked too. Only the reader's own objects (READERS) are `any`; a free name
// on neither list fails, so a new one is typed here before a page can use it.

const repo = fileURLToPath(new URL("..", import.meta.url));

const pages = [
  "README.md",
  ...readdirSync(join(repo, "docs"))
    .filter((n) => n.endsWith(".md"))
    .map((n) => `docs/${n}`),
];

interface Block {
  readonly page: string;
  readonly line: number;
  readonly code: string;
}

const blocks: Block[] = pages.flatMap((page) => {
  const text = readFileSync(join(repo, page), "utf8");
  return [...text.matchAll(/```ts\n([\s\S]*?)```/g)].map((m) => ({
    page,
    line: text.slice(0, m.index).split("\n").length + 1,
    code: m[1] as string,
  }));
});

/** The modules a page's reader imports from; the first to export a name supplies it. */
const MODULES = [
  "loopctl",
  "loopctl/ai-sdk",
  "loopctl/mcp",
  "loopctl/openai-agents",
  "loopctl/postgres",
  "loopctl/server",
];
/** Free names that are Node's, as the pages use them. */
const NODE: Record<string, string> = {
  randomUUID: "node:crypto",
  createHmac: "node:crypto",
  timingSafeEqual: "node:crypto",
  join: "node:path",
  z: "zod",
};
const type = (module: string, name: string): string => `import("${module}").${name}`;
/** Free names for values a page made earlier, or that any loop has: their types, as the pages use them. */
const DECLARED: Record<string, string> = {
  approver: type("loopctl/ask", "Approver"),
  channel: type("loopctl/ask", "ApprovalChannel"),
  ask: type("loopctl/ask", "PendingAsk"),
  gate: type("loopctl/engine", "Gate"),
  managers: type("loopctl/engine", "LoopManagers"),
  agent: type("loopctl/engine", "Agent"),
  model: type("loopctl/engine", "Model"),
  result: type("loopctl/engine", "RunResult"),
  descriptor: type("loopctl/engine", "ToolDescriptor"),
  tools: `readonly ${type("loopctl/engine", "Tool")}[]`,
  deploy: type("loopctl/engine", "Tool"),
  readFile: type("loopctl/engine", "Tool"),
  readLog: type("loopctl/engine", "Tool"),
  writeFile: type("loopctl/engine", "Tool"),
  status: type("loopctl/engine", "Tool"),
  guard: type("loopctl/engine", "Hook"),
  myHook: type("loopctl/engine", "Hook"),
  writesAsk: type("loopctl/engine", "Hook"),
  askBeforeWrites: type("loopctl/engine", "Hook"),
  store: type("loopctl/grant", "GrantStore"),
  grants: type("loopctl/grant", "GrantStore"),
  records: type("loopctl/server", "RecentRecords"),
  handler: type("loopctl/server", "ApprovalHandler"),
  server: type("node:http", "Server"),
  vetted: type("loopctl/mcp", "McpToolset"),
  audit: type("loopctl/audit", "AuditSink"),
  ui: "Promise<void>",
  signal: "AbortSignal",
  turn: "number",
  runId: "string",
  sessionId: "string",
  root: "string",
  dir: "string",
  LINK_SECRET: "string",
  HOOK_SECRET: "string",
};
/** Where a page's free names are another SDK's objects: the blocks it covers, and their types there. */
const CONTEXTS: readonly {
  readonly blocks: string;
  readonly applies: (b: Block) => boolean;
  readonly names: Record<string, string>;
}[] = [
  {
    blocks: 'an AI SDK loop\'s (importing from "ai")',
    applies: (b) => b.code.includes(' from "ai";'),
    names: { model: type("ai", "LanguageModel"), deploy: type("ai", "Tool"), readLog: type("ai", "Tool") },
  },
  {
    blocks: 'an OpenAI Agents SDK loop\'s (importing from "@openai/agents")',
    applies: (b) => b.code.includes(' from "@openai/agents";'),
    names: { deploy: type("@openai/agents", "FunctionTool"), readLog: type("@openai/agents", "FunctionTool") },
  },
  {
    blocks: "your-own-loop.md's, whose tool is a bare descriptor",
    applies: (b) => b.page === "docs/your-own-loop.md",
    names: { writeFile: type("loopctl/engine", "ToolDescriptor") },
  },
];
/**
 * Free names for the reader's own objects (their model API's tool call, tool
 * registry, UI and app): `any`, as nothing of loopctl's.
 */
const READERS = new Set(["call", "runTheTool", "registry", "askTheHuman", "isFrozenAccount", "app"]);
/** Diagnostics an excerpt may have that say nothing about the API. */
const EXCUSED = new Set([
  2307, // a provider package the reader installs (`@ai-sdk/openai`), not a dependency here
  2390, // a signature sketch (gate.md's `class Gate { call(…): …; }`) has no bodies
  2391,
  4111, // `process.env.X`: this project's noPropertyAccessFromIndexSignature, not the reader's
]);
const FREE_NAME = new Set([2304, 2552, 18004]);

const config = ts.getParsedCommandLineOfConfigFile(
  join(repo, "tsconfig.json"),
  {},
  { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => undefined },
) as ts.ParsedCommandLine;
const options: ts.CompilerOptions = { ...config.options, noEmit: true, noUnusedLocals: false };

const fileOf = (index: number): string => join(repo, "docs", `__snippet_${index}.ts`);
const modulesFile = join(repo, "docs", "__snippet_modules.ts");

/** The diagnostics of the blocks alone (checking all of src/ is tsc's job, and slow). */
const diagnosticsOf = (program: ts.Program): ts.Diagnostic[] =>
  blocks.flatMap((_, i) => {
    const file = program.getSourceFile(fileOf(i));
    return file === undefined
      ? []
      : [...program.getSyntacticDiagnostics(file), ...program.getSemanticDiagnostics(file)];
  });

const parsed = new Map<string, ts.SourceFile | undefined>();

function compile(sources: Map<string, string>): ts.Program {
  const host = ts.createCompilerHost(options);
  const read = host.readFile.bind(host);
  const exists = host.fileExists.bind(host);
  const getSourceFile = host.getSourceFile.bind(host);
  host.readFile = (file) => sources.get(file) ?? read(file);
  host.fileExists = (file) => sources.has(file) || exists(file);
  host.getSourceFile = (file, language, onError) => {
    const text = sources.get(file);
    if (text !== undefined) return ts.createSourceFile(file, text, language);
    if (!parsed.has(file)) parsed.set(file, getSourceFile(file, language, onError));
    return parsed.get(file);
  };
  return ts.createProgram([...sources.keys()], options, host);
}

/** Each export of the reader's modules: the module it comes from, and whether it is a value. */
function exportsOf(program: ts.Program): Map<string, { readonly from: string; readonly value: boolean }> {
  const checker = program.getTypeChecker();
  const file = program.getSourceFile(modulesFile) as ts.SourceFile;
  const owners = new Map<string, { from: string; value: boolean }>();
  file.statements.filter(ts.isImportDeclaration).forEach((statement, i) => {
    const specifier = statement.moduleSpecifier;
    const module = checker.getSymbolAtLocation(specifier);
    expect(module, `${MODULES[i]} resolves`).toBeDefined();
    for (const symbol of checker.getExportsOfModule(module as ts.Symbol)) {
      const target = symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol;
      if (!owners.has(symbol.name))
        owners.set(symbol.name, { from: MODULES[i] as string, value: (target.flags & ts.SymbolFlags.Value) !== 0 });
    }
  });
  return owners;
}

const where = (d: ts.Diagnostic, preludeLines: number[]): string => {
  const index = blocks.findIndex((_, i) => d.file?.fileName === fileOf(i));
  const block = blocks[index];
  if (block === undefined) return d.file?.fileName ?? "(no file)";
  const line = d.file === undefined || d.start === undefined ? 0 : d.file.getLineAndCharacterOfPosition(d.start).line;
  return `${block.page}:${block.line + line - (preludeLines[index] ?? 0)}`;
};

describe("the README's and docs' ts blocks type-check against the current API", () => {
  it("every block compiles, its free names imported from loopctl or declared", () => {
    expect(blocks.length).toBeGreaterThan(30);
    const sources = new Map<string, string>(blocks.map((b, i) => [fileOf(i), `${b.code}\nexport {};\n`]));
    sources.set(modulesFile, `${MODULES.map((m, i) => `import * as m${i} from "${m}";`).join("\n")}\nexport {};\n`);
    const first = compile(sources);
    const owners = exportsOf(first);

    const free = new Map<string, Set<string>>();
    for (const d of diagnosticsOf(first)) {
      if (!FREE_NAME.has(d.code) || d.file === undefined) continue;
      const name = /'([^']+)'/.exec(ts.flattenDiagnosticMessageText(d.messageText, " "))?.[1] as string;
      free.set(d.file.fileName, (free.get(d.file.fileName) ?? new Set()).add(name));
    }
    const unknown: string[] = [];
    const used = new Set<number>();
    const readers = new Set<string>();
    const preludeLines = blocks.map((b, i) => {
      const names = [...(free.get(fileOf(i)) ?? [])];
      const contexts = CONTEXTS.flatMap((c, j) => (c.applies(b) ? [j] : []));
      const prelude = names.map((name) => {
        const owner = owners.get(name);
        if (owner !== undefined) return `import ${owner.value ? "" : "type "}{ ${name} } from "${owner.from}";`;
        if (NODE[name] !== undefined) return `import { ${name} } from "${NODE[name]}";`;
        const context = contexts.find((j) => CONTEXTS[j]?.names[name] !== undefined);
        if (context !== undefined) used.add(context);
        const declared = context === undefined ? DECLARED[name] : CONTEXTS[context]?.names[name];
        if (declared !== undefined) return `declare const ${name}: ${declared};`;
        if (READERS.has(name)) {
          readers.add(name);
          return `declare const ${name}: any;`;
        }
        unknown.push(`${b.page}:${b.line}: ${name} is no loopctl export and not declared here`);
        return `declare const ${name}: any;`;
      });
      sources.set(fileOf(i), `${prelude.join("\n")}\n${b.code}\nexport {};\n`);
      return prelude.length;
    });
    expect(unknown).toEqual([]);
    expect([...READERS].filter((name) => !readers.has(name)).map((name) => `${name}: no page uses it`)).toEqual([]);
    expect(CONTEXTS.filter((_, j) => !used.has(j)).map((c) => `no free name of ${c.blocks} blocks`)).toEqual([]);

    const second = compile(sources);
    const problems = diagnosticsOf(second)
      .filter((d) => !EXCUSED.has(d.code))
      .map((d) => `${where(d, preludeLines)}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
    expect(problems).toEqual([]);
  }, 120_000);
});
