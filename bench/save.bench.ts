import type { BenchModule } from "./lib/harness.js";
import { unavailableRows } from "./lib/harness.js";
const m: BenchModule = { id: "save", title: "grant decision", async run() { return unavailableRows("save", [{ name: "grant decision" }], "pending"); } };
export default m;
