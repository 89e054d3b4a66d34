import { cpSync } from "node:fs";
import { defineConfig } from "tsup";

export default defineConfig([
  {
    entry: {
      index: "src/index.ts",
      "ask/index": "src/ask/index.ts",
      "grant/index": "src/grant/index.ts",
      "engine/index": "src/engine/index.ts",
      "audit/index": "src/audit/index.ts",
      "testing/index": "src/testing/index.ts",
      "server/index": "src/server/index.ts",
      "ai-sdk/index": "src/ai-sdk/index.ts",
      "mcp/index": "src/mcp/index.ts",
      "openai-agents/index": "src/openai-agents/index.ts",
      "postgres/index": "src/postgres/index.ts",
    },
    format: ["esm", "cjs"],
    dts: true,
    clean: false,
    sourcemap: true,
    target: "node20",
    splitting: true,
    treeshake: true,
    // The server finds its console files through import.meta.url, in the CommonJS build too.
    shims: true,
    onSuccess: async () => {
      cpSync("src/server/console", "dist/server/console", { recursive: true });
    },
  },
  {
    entry: { cli: "src/cli/main.ts" },
    format: ["esm"],
    dts: false,
    clean: false,
    sourcemap: true,
    target: "node20",
    banner: { js: "#!/usr/bin/env node" },
  },
]);
