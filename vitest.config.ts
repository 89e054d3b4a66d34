import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import SummaryReporter from "./test/support/summary-reporter.js";

const src = (path: string): string => fileURLToPath(new URL(`./src/${path}`, import.meta.url));

export default defineConfig({
  resolve: {
    // Examples and tests may import the package by name, as a user would.
    alias: [
      { find: /^loopctl$/, replacement: src("index.ts") },
      {
        find: /^loopctl\/(ask|grant|engine|audit|testing|server|ai-sdk|mcp|openai-agents|postgres)$/,
        replacement: src("$1/index.ts"),
      },
    ],
  },
  test: {
    include: ["test/**/*.test.ts"],
    // Type tests (`npm run test:types`, run by .ci/run): tsc checks them and the source they import,
    // and each failing assertion fails its test. `npm run typecheck` checks them too.
    typecheck: { include: ["test/**/*.test-d.ts"], tsconfig: "test/tsconfig.types.json" },
    // Three test files at a time even on two cores (vitest's default there is one): much of the wall
    // time is spent waiting on child processes, PostgreSQL and sockets. On two cores, two files at a
    // time took about six and a half minutes, three about five and a half.
    maxWorkers: Math.max(3, availableParallelism() - 1),
    testTimeout: 30_000,
    hookTimeout: 30_000,
    reporters: ["default", new SummaryReporter()],
  },
});
