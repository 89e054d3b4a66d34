import { readFileSync } from "node:fs";
import { expect } from "vitest";
import * as askModule from "loopctl/ask";
import * as engineModule from "loopctl/engine";
import * as grantModule from "loopctl/grant";

/** The code blocks of one language in `page` (a path from the repository root), in order. */
export function codeBlocks(page: string, lang: string): string[] {
  const text = readFileSync(new URL(`../../${page}`, import.meta.url), "utf8");
  return [...text.matchAll(new RegExp("```" + lang + "\\n([\\s\\S]*?)```", "g"))].map((m) => m[1] as string);
}

const MODULES: Record<string, Record<string, unknown>> = {
  "loopctl/ask": askModule,
  "loopctl/engine": engineModule,
  "loopctl/grant": grantModule,
};

/**
 * Runs a ts block of the page as the reader would: its imports bound from the
 * modules they name (each name must be exported there), the free names it
 * uses from `scope`. Resolves with what its last expression statement gave.
 */
export async function runSnippet(code: string, scope: Record<string, unknown>): Promise<Record<string, unknown>> {
  const imported: Record<string, unknown> = {};
  const body = code.replace(/^import \{([^}]+)\} from "([^"]+)";\n/gm, (_, names: string, from: string) => {
    const module = MODULES[from];
    expect(module, `a snippet imports from ${from}`).toBeDefined();
    for (const name of names.split(",").map((n) => n.trim())) {
      expect(Object.hasOwn(module ?? {}, name), `${from} exports ${name}`).toBe(true);
      imported[name] = module?.[name];
    }
    return "";
  });
  const names = { ...scope, ...imported };
  // The snippets are plain JavaScript apart from their imports; `const`s become the result.
  const declared = [...body.matchAll(/^const (?:\[([^\]]+)\]|(\w+)) =/gm)].flatMap((m) =>
    (m[1] ?? m[2] ?? "").split(",").map((n) => n.trim()),
  );
  const AsyncFunction = Object.getPrototypeOf(async () => undefined).constructor as new (
    ...args: string[]
  ) => (...values: unknown[]) => Promise<Record<string, unknown>>;
  const run = new AsyncFunction(...Object.keys(names), `${body}\nreturn { ${declared.join(", ")} };`);
  return run(...Object.values(names));
}
