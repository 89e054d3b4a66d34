// ESLint with typescript-eslint's type-aware rules over every file tsc checks;
// plain JavaScript (the console's browser script, CI helpers, this file) gets
// the untyped rules with the globals of where it runs.
import js from "@eslint/js";
import globals from "globals";
import tseslint from "typescript-eslint";

export default tseslint.config(
  { ignores: ["dist/", "coverage/", "node_modules/", "test-results/", ".loopctl-demo/"] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      // Every union switched over is a tagged union: a new member must be handled.
      "@typescript-eslint/switch-exhaustiveness-check": [
        "error",
        { considerDefaultExhaustiveForUnions: true, requireDefaultForNonUnion: false },
      ],
      // Implementations of async contracts (Model.generate, a tool's execute,
      // a resolver) are async by contract whether or not they await.
      "@typescript-eslint/require-await": "off",
      // An AbortSignal's reason is the platform's rejection value for a cancel.
      "@typescript-eslint/prefer-promise-reject-errors": [
        "error",
        { allowThrowingAny: true, allowThrowingUnknown: true },
      ],
      "@typescript-eslint/no-unused-vars": [
        "error",
        { argsIgnorePattern: "^_", varsIgnorePattern: "^_", ignoreRestSiblings: true },
      ],
      // A closure may read a variable that is assigned once, after it is made.
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],
      // Terminal escapes and control characters are matched on purpose (ANSI
      // styling, escaping what reaches a terminal).
      "no-control-regex": "off",
    },
  },
  {
    // Tests pass methods to expect() and spies without calling them, and read
    // values typed `any` on purpose: vitest's asymmetric matchers
    // (expect.any, expect.stringContaining) and JSON.parse of a child's output.
    files: ["test/**"],
    rules: {
      "@typescript-eslint/unbound-method": "off",
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-return": "off",
    },
  },
  {
    // Type tests name the SDKs' generic types for any context, as the SDKs do.
    files: ["test/**/*.test-d.ts"],
    rules: { "@typescript-eslint/no-explicit-any": "off" },
  },
  {
    files: ["**/*.js", "**/*.mjs"],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { globals: globals.node },
  },
  {
    files: ["src/server/console/**/*.js"],
    languageOptions: { globals: globals.browser, sourceType: "script" },
  },
);
