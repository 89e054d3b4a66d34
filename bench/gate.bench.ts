import type { BenchModule } from "./lib/harness.js";
import { unavailableRows } from "./lib/harness.js";
const m: BenchModule = { id: "gate", title: "grant decision", async run() { return unavailableRows("gate", [{ name: "grant decision" }], "pending"); } };
export default m;
