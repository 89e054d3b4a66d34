import { constants, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import writeFileAtomic from "write-file-atomic";
import type { BenchModule, Row } from "./lib/harness.js";
import { failedRow, measuredRow, paired, ratioTarget, timeTogether, unavailableRows } from "./lib/harness.js";
import { loadModule } from "./lib/load.js";

const TARGET = ratioTarget(1.5);

async function syncFolder(path: string): Promise<void> {
  const handle = await open(path, constants.O_RDONLY | constants.O_DIRECTORY);
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

function label(n: number): string {
  return n >= 1000 ? `${n / 1000}k` : String(n);
}

const save: BenchModule = {
  id: "save",
  title: "FileGrantStore.save with 10/1k/10k grants vs a bare write-file-atomic of the same bytes",
  async run(ctx) {
    const sizes = ctx.quick ? [10, 1_000] : [10, 1_000, 10_000];
    const names = sizes.map((n) => ({ name: `FileGrantStore.save, ${label(n)} grants in the ledger`, target: TARGET }));
    const loaded = await loadModule("grant", ["FileGrantStore", "Grant", "GrantScope"]);
    if (!loaded.ok) return unavailableRows(this.id, names, loaded.reason);
    const { FileGrantStore, Grant, GrantScope } = loaded.mod;
    const root = mkdtempSync(join(tmpdir(), "loopctl-bench-save-"));
    const rows: Row[] = [];
    try {
      for (const [k, n] of sizes.entries()) {
        try {
          const project = join(root, `project-${n}`);
          mkdirSync(project);
          const store = new FileGrantStore(join(root, "grants"), project);
          // Seed the ledger in one write: n saves would take minutes and measure nothing new.
          const grants = Array.from({ length: n }, (_, i) =>
            new Grant(
              i % 2 === 0 ? "write_file" : `tool_${i}`,
              "allow",
              i % 2 === 0
                ? GrantScope.thisCall({ path: `/repo/src/module-${i}/index.ts`, mode: "overwrite" })
                : GrantScope.thisTool(),
            ).withCreatedAtMs(1_700_000_000_000 + i),
          );
          mkdirSync(dirname(store.ledgerPath), { recursive: true, mode: 0o700 });
          writeFileSync(store.ledgerPath, JSON.stringify(grants.map((g) => g.toJSON())), { mode: 0o600 });
          // Re-granting an existing rule replaces it: the ledger keeps n entries, so each sample writes the same size.
          const again = grants[n >> 1]!;
          await store.save(again);
          const loadedBack = await store.load();
          if (loadedBack.length !== n)
            throw new Error(`ledger holds ${loadedBack.length} grants after a re-grant, expected ${n}`);
          const bytes = readFileSync(store.ledgerPath);
          const folder = dirname(store.ledgerPath);
          const floorPath = join(folder, "floor.json");
          const t = await timeTogether(
            ctx,
            {
              // A fresh options object every call: write-file-atomic may keep state on the one it is given.
              floor: () => writeFileAtomic(floorPath, bytes, { mode: 0o600 }),
              // The same write made durable: the folder fsync after the rename that spec section 4 requires.
              durable: async () => {
                await writeFileAtomic(floorPath, bytes, { mode: 0o600 });
                await syncFolder(folder);
              },
              ours: () => store.save(again),
            },
            // Saving waits on the disk (fsync): wall time, one call per sample.
            { heavy: true, clock: "wall", batch: false },
          );
          rows.push(
            measuredRow({
              bench: this.id,
              name: names[k]!.name,
              ...paired(t, "ours", "floor"),
              target: TARGET,
              note: `${bytes.length} B ledger; floor: writeFileAtomic(path, sameBytes, { mode: 0o600 }) in the same folder (fsync on, ${tmpdir()})`,
            }),
          );
          const durable = paired(t, "durable", "floor");
          rows.push(
            measuredRow({
              bench: this.id,
              name: `  the floor made durable (+ folder fsync), ${label(n)} grants`,
              ...durable,
              note: "writeFileAtomic then open, fsync and close of the folder: the least a save that survives a power cut can do, before any lock or check",
            }),
          );
          const beyond = paired(t, "ours", "durable");
          rows.push(
            measuredRow({
              bench: this.id,
              name: `  FileGrantStore.save vs the durable floor, ${label(n)} grants`,
              ...beyond,
              note: "what the lock, the folder and ledger checks and the cache add on top of the durable write",
            }),
          );
        } catch (error) {
          rows.push(failedRow(this.id, names[k]!.name, TARGET, error));
        }
      }
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
    return rows;
  },
};

export default save;
