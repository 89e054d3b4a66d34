import type { AskResolution, PendingAsk } from "../src/ask/index.js";
import type { BenchModule, Row } from "./lib/harness.js";
import { failedRow, measuredRow, paired, ratioTarget, timeTogether, unavailableRows } from "./lib/harness.js";
import { BENCH_ASK, BENCH_ASKS } from "./lib/fixtures.js";
import { loadModule } from "./lib/load.js";

const ASK: PendingAsk = BENCH_ASK;
const APPROVE: AskResolution = { type: "approve" };

/**
 * The floor: the two hand-offs a park cannot avoid, as bare promises — the
 * ask travels to the approver, the answer travels back to the parked call.
 */
async function bareHandOffs(): Promise<AskResolution> {
  let answer!: (r: AskResolution) => void;
  const answered = new Promise<AskResolution>((resolve) => (answer = resolve));
  let deliver!: (a: PendingAsk) => void;
  const delivered = new Promise<PendingAsk>((resolve) => (deliver = resolve));
  deliver(ASK);
  const ask = await delivered;
  if (ask.id === ASK.id) answer(APPROVE);
  return answered;
}

const TARGET = ratioTarget(10);
const NAMES = [
  { name: "park → approve → resume (ApprovalChannel)", target: TARGET },
  { name: "park round trip, fresh AbortController per ask", target: null },
  { name: "SyncAskResolver approve (one hand-off floor)", target: null },
] as const;

const park: BenchModule = {
  id: "park",
  title: "park → approve → resume through ApprovalChannel vs two bare promise hand-offs",
  async run(ctx) {
    const loaded = await loadModule("ask", ["ApprovalChannel", "SyncAskResolver"]);
    if (!loaded.ok) return unavailableRows(this.id, NAMES, loaded.reason);
    const { ApprovalChannel, SyncAskResolver } = loaded.mod;
    const [channel, approver] = ApprovalChannel.pair(16);
    // Ids taken in turn: the channel refuses one among the last 256 that ended on it.
    const shared = new AbortController().signal;
    let approved = 0;
    let turn = 0;
    const roundTrip = async (signal: AbortSignal): Promise<void> => {
      const parked = channel.resolve(BENCH_ASKS[turn++ % BENCH_ASKS.length]!, { signal });
      const ask = await approver.next();
      if (ask === undefined || !approver.resolve(ask.id, APPROVE)) throw new Error("the approver lost the ask");
      if ((await parked).type === "approve") approved++;
    };
    const sync = new SyncAskResolver(() => true);
    const rows: Row[] = [];
    try {
      const t = await timeTogether(
        ctx,
        {
          floor: bareHandOffs,
          ours: () => roundTrip(shared),
          oursFreshSignal: () => roundTrip(new AbortController().signal),
          oneHandOff: () => Promise.resolve(APPROVE),
          sync: () => sync.resolve(ASK, { signal: shared }),
        },
        {
          verify: () => {
            if (approved === 0 || channel.size !== 0)
              throw new Error("round trips did not approve, or left asks parked");
          },
        },
      );
      rows.push(
        measuredRow({ bench: this.id, name: NAMES[0].name, ...paired(t, "ours", "floor"), target: TARGET }),
        measuredRow({
          bench: this.id,
          name: NAMES[1].name,
          ...paired(t, "oursFreshSignal", "floor"),
          note: "includes new AbortController() per ask, which the engine allocates, not the channel",
        }),
        measuredRow({ bench: this.id, name: NAMES[2].name, ...paired(t, "sync", "oneHandOff") }),
      );
    } catch (error) {
      rows.push(failedRow(this.id, NAMES[0].name, TARGET, error));
    } finally {
      approver.close();
    }
    return rows;
  },
};

export default park;
