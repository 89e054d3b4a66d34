import type { BenchModule } from "./lib/harness.js";
import { unavailableRows } from "./lib/harness.js";
const m: BenchModule = { id: "grant-decision", title: "grant decision", async run() { return unavailableRows("grant-decision", [{ name: "grant decision" }], "pending"); } };
export default m;
