// `node --import ./test/support/record-imports.mjs …` appends the URL of every
// module the process loads through `import` to the file named by
// LOOPCTL_IMPORT_LOG, one a line.
import { register } from "node:module";

register("./record-imports-hooks.mjs", import.meta.url);
