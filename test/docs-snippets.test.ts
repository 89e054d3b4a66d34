import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

// Every ts block of the README and docs/ type-checked against the current API
// with the project's compiler settings, so a renamed export, option, field or
// method on a page fails here. Blocks are excerpts: a name a block uses without
// importing it is imported from the loopctl module that exports it, and any
// other free name (a value the page made earlier, such as `approver`) is
// declared `any`. A free PascalCase name must be a loopctl export, so a
// class or type a page names that no longer exists is reported, not hidden.

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
/** Diagnostics an excerpt may have that say nothing about the API. */
const EXCUSED = new Set([
  2307, // a provider package the reader installs (`@ai-sdk/openai`), not a dependency here
  2390, // a signature sketch (gate.md's `class Gate { call(…): …; }`) has no bodies
  2391,
  4111, // `process.env.X`: this project's noPropertyAccessFromIndexSignature, not the reader's
  7006, // a callback's parameter, untyped only because its callee is a free name declared `any`
  7031,
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
    const preludeLines = blocks.map((b, i) => {
      const names = [...(free.get(fileOf(i)) ?? [])];
      const prelude = names.map((name) => {
        const owner = owners.get(name);
        if (owner !== undefined) return `import ${owner.value ? "" : "type "}{ ${name} } from "${owner.from}";`;
        if (NODE[name] !== undefined) return `import { ${name} } from "${NODE[name]}";`;
        if (/^[A-Z][a-z]/.test(name)) unknown.push(`${b.page}:${b.line}: ${name} is no loopctl export`);
        return `declare const ${name}: any;`;
      });
      sources.set(fileOf(i), `${prelude.join("\n")}\n${b.code}\nexport {};\n`);
      return prelude.length;
    });
    expect(unknown).toEqual([]);

    const second = compile(sources);
    const problems = diagnosticsOf(second)
      .filter((d) => !EXCUSED.has(d.code))
      .map((d) => `${where(d, preludeLines)}: ${ts.flattenDiagnosticMessageText(d.messageText, " ")}`);
    expect(problems).toEqual([]);
  }, 120_000);
});
