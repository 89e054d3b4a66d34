import { defineConfig } from "vitest/config";
import base from "./vitest.config.js";

// The tests that drive a real Chromium: `npm run test:browser`, not `npm test`.
export default defineConfig({
  ...(base.resolve === undefined ? {} : { resolve: base.resolve }),
  test: {
    include: ["test/browser/**/*.browser.ts"],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // One browser at a time: the machine's two cores are shared.
    fileParallelism: false,
    ...(base.test?.reporters === undefined ? {} : { reporters: base.test.reporters }),
  },
});
