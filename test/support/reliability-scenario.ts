// Run as: node --import tsx test/support/reliability-scenario.ts <name>
// (add --expose-gc for scenarios that need it). Runs one fault scenario on the
// system's timers and prints one JSON line: the report, the invariant
// violations, and the timers still active once the run is over. It then
// simply returns: a promise, timer or listener left behind by the engine
// would keep this process alive, which the parent test detects.
import { scenarioNamed, violations } from "./reliability-scenarios.js";
import { systemEnv } from "./reliability-harness.js";

const name = process.argv[2];
if (name === undefined) throw new Error("usage: reliability-scenario.ts <name>");
const scenario = scenarioNamed(name);
const report = await scenario.run(systemEnv());
const handles = process.getActiveResourcesInfo().filter((kind) => kind === "Timeout" || kind === "Immediate");
process.stdout.write(`${JSON.stringify({ name, report, violations: violations(scenario.expect, report), handles })}\n`);
