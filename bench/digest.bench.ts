import { createHash } from "node:crypto";
import stableStringify from "fast-json-stable-stringify";
import type { BenchModule, Row, Target } from "./lib/harness.js";
import { failedRow, measuredRow, ns, paired, ratioTarget, timeTogether, unavailableRows } from "./lib/harness.js";
import { largeArgs, smallArgs, textOfBytes } from "./lib/fixtures.js";
import { loadModule } from "./lib/load.js";

const SMALL_TARGET = ratioTarget(3);

const NAMES: readonly { name: string; target: Target | null }[] = [
  { name: "argsDigest ~200 B vs JSON.stringify", target: SMALL_TARGET },
  { name: "argsDigest ~200 B vs fast-json-stable-stringify + sha256", target: null },
  { name: "canonicalJson ~200 B vs JSON.stringify", target: null },
  { name: "argsDigest 1 MB vs JSON.stringify", target: null },
  { name: "argsDigest 1 MB vs fast-json-stable-stringify + sha256", target: null },
  { name: "digest16 per MB vs native sha256", target: null },
];

function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

const digest: BenchModule = {
  id: "digest",
  title: "argsDigest / canonicalJson / digest16 vs JSON.stringify and fast-json-stable-stringify + sha256",
  async run(ctx) {
    const loaded = await loadModule("grant", ["argsDigest", "canonicalJson", "digest16"]);
    if (!loaded.ok) return unavailableRows(this.id, NAMES, loaded.reason);
    const { argsDigest, canonicalJson, digest16 } = loaded.mod;
    const rows: Row[] = [];
    const small = smallArgs();
    const smallBytes = Buffer.byteLength(JSON.stringify(small));
    try {
      const t = await timeTogether(ctx, {
        stringify: () => JSON.stringify(small),
        stableSha: () => sha256(stableStringify(small)),
        canonical: () => canonicalJson(small),
        ours: () => argsDigest(small),
      });
      rows.push(
        measuredRow({
          bench: this.id,
          name: NAMES[0]!.name,
          ...paired(t, "ours", "stringify"),
          target: SMALL_TARGET,
          note: `${smallBytes} B of JSON`,
        }),
        measuredRow({ bench: this.id, name: NAMES[1]!.name, ...paired(t, "ours", "stableSha") }),
        measuredRow({ bench: this.id, name: NAMES[2]!.name, ...paired(t, "canonical", "stringify") }),
      );
    } catch (error) {
      rows.push(failedRow(this.id, NAMES[0]!.name, SMALL_TARGET, error));
    }

    const large = largeArgs(ctx.quick ? 100_000 : 1_000_000);
    const largeBytes = Buffer.byteLength(JSON.stringify(large));
    const mb = largeBytes / 1e6;
    try {
      const t = await timeTogether(
        ctx,
        {
          stringify: () => JSON.stringify(large),
          stableSha: () => sha256(stableStringify(large)),
          ours: () => argsDigest(large),
        },
        { heavy: true },
      );
      rows.push(
        measuredRow({
          bench: this.id,
          name: NAMES[3]!.name,
          ...paired(t, "ours", "stringify"),
          note: `${largeBytes} B of JSON; ours ${(mb / (t.ns["ours"]! / 1e9)).toFixed(0)} MB/s`,
        }),
        measuredRow({ bench: this.id, name: NAMES[4]!.name, ...paired(t, "ours", "stableSha") }),
      );
    } catch (error) {
      rows.push(failedRow(this.id, NAMES[3]!.name, null, error));
    }

    const text = textOfBytes(ctx.quick ? 100_000 : 1_000_000);
    const textMb = Buffer.byteLength(text) / 1e6;
    try {
      const t = await timeTogether(ctx, { sha: () => sha256(text), ours: () => digest16(text) }, { heavy: true });
      rows.push(
        measuredRow({
          bench: this.id,
          name: NAMES[5]!.name,
          ours: ns(t.ns["ours"]! / textMb),
          floor: ns(t.ns["sha"]! / textMb),
          ratio: paired(t, "ours", "sha").ratio,
          note: `ours ${(textMb / (t.ns["ours"]! / 1e9)).toFixed(0)} MB/s, sha256 ${(textMb / (t.ns["sha"]! / 1e9)).toFixed(0)} MB/s (mixed ASCII and multi-byte text)`,
        }),
      );
    } catch (error) {
      rows.push(failedRow(this.id, NAMES[5]!.name, null, error));
    }
    return rows;
  },
};

export default digest;
