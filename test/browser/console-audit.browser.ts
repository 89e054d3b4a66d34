import { randomBytes } from "node:crypto";
import { appendFile, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AuditSink } from "loopctl/audit";
import { RecentRecords, auditLogRecords, createApprovalServer } from "loopctl/server";
import type { RecordSource } from "loopctl/server";
import type { GateDecision } from "loopctl/engine";
import { encodeAuditLine } from "../../src/audit/line.js";
import { gateRecord } from "../support/cli-audit-fixtures.js";
import { overflowsSideways, screenshot, useBrowser } from "./support/chromium.js";

const chromium = useBrowser();
const { cleanups } = chromium;
let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "loopctl-console-audit-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The console over `records` at `width`, once it shows `rows` decisions. */
async function consoleOver(records: RecordSource, rows: number, width = 1280) {
  const server = await createApprovalServer({ records });
  cleanups.push(() => server.close());
  const page = await chromium.browser.page(width);
  cleanups.push(() => page.close());
  await page.goto(server.consoleUrl);
  await expect.poll(() => page.locator("#records tbody tr").count()).toBe(rows);
  const row = (i: number) => page.locator("#records tbody tr").nth(i);
  const log = (i: number) => row(i).locator("td[data-label='Log']").textContent();
  return { page, row, log, note: page.locator("#records-check") };
}

describe("the console's audit log view", () => {
  it("an approval appended to a keyed log by one without the key is shown as vouched for by nothing, and the log as not verifying", async () => {
    const path = join(dir, "forged.jsonl");
    const key = randomBytes(32);
    const sink = await AuditSink.open(path, { key });
    await sink.append(gateRecord(1, { verdict: "deny" }));
    await sink.append(gateRecord(2, { verdict: "deny" }));
    await sink.close();
    const last = JSON.parse((await readFile(path, "utf8")).trim().split("\n").at(-1) as string) as { hash: string };
    await appendFile(path, encodeAuditLine(3, last.hash, gateRecord(3, { verdict: "ask_allowed" }), undefined).text);

    const { page, row, log, note } = await consoleOver(auditLogRecords(path, { key }), 3);
    // Newest first: the forged approval on top, struck through, its Log cell saying nothing vouches for it.
    expect(await row(0).locator("td").nth(2).textContent()).toBe("ask_allowed");
    expect(await row(0).locator(".verdict").getAttribute("class")).toBe("verdict unvouched");
    expect(await log(0)).toBe("NOT VOUCHED FOR");
    expect(await row(0).getAttribute("class")).toBe("unvouched");
    expect(await row(0).locator("td[data-label='Log']").getAttribute("title")).toContain("line 3:");
    expect([await log(1), await log(2)]).toEqual(["sealed", "sealed"]);
    expect(await page.locator("#records-log").isVisible()).toBe(true);
    expect(await note.isVisible()).toBe(true);
    expect(await note.getAttribute("data-state")).toBe("broken");
    expect(await note.textContent()).toContain(
      "The audit log does not verify: line 3 carries no mac: it was not written with this key",
    );
    expect(await note.getAttribute("role")).toBe("status");
    await screenshot(page, "console-audit-forged-1280");

    // Narrow: the note and the Log cell fit, nothing overflows sideways.
    const narrow = await consoleOver(auditLogRecords(path, { key }), 3, 400);
    expect(await narrow.log(0)).toBe("NOT VOUCHED FOR");
    expect(await overflowsSideways(narrow.page)).toBe(false);
    await screenshot(narrow.page, "console-audit-forged-400");
  });

  it("without the key the view says that only the chain was checked, and each line is 'chain only'", async () => {
    const path = join(dir, "unkeyed.jsonl");
    const sink = await AuditSink.open(path);
    await sink.append(gateRecord(1));
    await sink.append(gateRecord(2));
    await sink.close();
    const { log, note } = await consoleOver(auditLogRecords(path), 2);
    expect([await log(0), await log(1)]).toEqual(["chain only", "chain only"]);
    expect(await note.getAttribute("data-state")).toBe("chain");
    expect(await note.textContent()).toContain("no decision here is authenticated");
  });

  it("lines after the one the seal vouches for say so, row by row and above the table", async () => {
    const path = join(dir, "behind.jsonl");
    const key = randomBytes(32);
    const sink = await AuditSink.open(path, { key });
    await sink.append(gateRecord(1));
    const seal = await readFile(`${path}.seal`, "utf8");
    await sink.append(gateRecord(2));
    await sink.close();
    await import("node:fs/promises").then((fs) => fs.writeFile(`${path}.seal`, seal));
    const { log, note } = await consoleOver(auditLogRecords(path, { key }), 2);
    expect([await log(0), await log(1)]).toEqual(["key, not sealed", "sealed"]);
    expect(await note.getAttribute("data-state")).toBe("key");
    expect(await note.textContent()).toContain(
      "The seal vouches for line 1 only: lines 2 to 2 rest on their macs alone",
    );
  });

  it("a standing the page does not know (another source's, an inherited name) is shown as vouched for by nothing", async () => {
    const check = { by: "key", ok: true, first: 1, last: 3, whole: true, keyed: true, partial: false } as const;
    const source: RecordSource = {
      recent: () => [],
      audited: () =>
        Promise.resolve({
          check,
          records: [
            { record: gateRecord(1), seq: 1, vouched: "sealed" },
            { record: gateRecord(2), seq: 2, vouched: "constructor" as never },
            { record: gateRecord(3), seq: 3, vouched: "trusted" as never },
          ],
        }),
    };
    const { log } = await consoleOver(source, 3);
    expect([await log(0), await log(1), await log(2)]).toEqual(["NOT VOUCHED FOR", "NOT VOUCHED FOR", "sealed"]);
  });

  it("a reload of the records that fails says so above them, and what they show is said to be as last read", async () => {
    const check = {
      by: "key",
      ok: true,
      first: 1,
      last: 1,
      whole: true,
      keyed: true,
      sealed: 1,
      partial: false,
    } as const;
    let fail = false;
    let listener: ((record: GateDecision) => void) | undefined;
    const source: RecordSource = {
      recent: () => [],
      audited: () =>
        fail
          ? Promise.reject(new Error("the seal is a folder now"))
          : Promise.resolve({ check, records: [{ record: gateRecord(1), seq: 1, vouched: "sealed" as const }] }),
      subscribe: (heard) => {
        listener = heard;
        return () => undefined;
      },
    };
    const { page, log, note } = await consoleOver(source, 1);
    expect(await log(0)).toBe("sealed");
    expect(await note.getAttribute("data-state")).toBe("key");
    await expect.poll(() => page.locator("#status").getAttribute("data-state")).toBe("live");
    // A new decision: the page reads the list again, and this time the source fails.
    fail = true;
    listener?.(gateRecord(2));
    await expect.poll(() => note.getAttribute("data-state")).toBe("broken");
    expect(await note.textContent()).toMatch(
      /^The decisions could not be read again \(503\): those shown, and what was said of them, are as read at .+\. Checked with the key/,
    );
    expect(await log(0)).toBe("sealed");
    // Read again: the note says what the check says.
    fail = false;
    listener?.(gateRecord(3));
    await expect.poll(() => note.getAttribute("data-state")).toBe("key");
    // A reload that gets no reply at all (the connection cut) says so the same way.
    await page.route("**/api/records*", (route) => route.abort("connectionreset"));
    listener?.(gateRecord(6));
    await expect.poll(() => note.getAttribute("data-state")).toBe("broken");
    expect(await note.textContent()).toMatch(/^The decisions could not be read again \(no reply\): those shown/);
    await page.unroute("**/api/records*");
    listener?.(gateRecord(7));
    await expect.poll(() => note.getAttribute("data-state")).toBe("key");
    // Nor is a reply that is not the server's (a proxy's JSON, 200) taken for the decisions.
    await page.route("**/api/records*", (route) =>
      route.fulfill({ status: 200, contentType: "application/json", body: '{"status":"signed_out"}' }),
    );
    listener?.(gateRecord(8));
    await expect.poll(() => note.getAttribute("data-state")).toBe("broken");
    expect(await note.textContent()).toMatch(
      /^The decisions could not be read again \(the reply was not the approval server's\): those shown/,
    );
    expect(await log(0)).toBe("sealed");
    await page.unroute("**/api/records*");
    listener?.(gateRecord(9));
    await expect.poll(() => note.getAttribute("data-state")).toBe("key");
    // A status region is read out as its text is set: a reload that finds the same is not said again.
    await page.evaluate(`(() => {
      window.noteSet = 0;
      new MutationObserver(() => (window.noteSet += 1)).observe(document.getElementById("records-check"), {
        childList: true,
        characterData: true,
        subtree: true,
      });
    })()`);
    let reads = 0;
    const counted = source.audited;
    source.audited = (limit) => {
      reads += 1;
      return (counted as NonNullable<RecordSource["audited"]>)(limit);
    };
    listener?.(gateRecord(4));
    listener?.(gateRecord(5));
    await expect.poll(() => reads).toBeGreaterThanOrEqual(2);
    await page.waitForTimeout(200);
    expect(await page.evaluate<number>("window.noteSet")).toBe(0);
  });

  it("a burst of live decisions over an audit log reads the log a bounded number of times, not once each, and shows the last", async () => {
    const path = join(dir, "burst.jsonl");
    const key = randomBytes(32);
    const sink = await AuditSink.open(path, { key });
    cleanups.push(() => sink.close());
    await sink.append(gateRecord(1));
    // The log read at each request, and followed live by an observer beside the writer.
    const listeners = new Set<(record: GateDecision) => void>();
    const source: RecordSource = {
      ...auditLogRecords(path, { key }),
      subscribe: (heard) => {
        listeners.add(heard);
        return () => listeners.delete(heard);
      },
    };
    const { page, log } = await consoleOver(source, 1);
    await expect.poll(() => page.locator("#status").getAttribute("data-state")).toBe("live");
    let reads = 0;
    page.on("request", (request) => {
      if (new URL(request.url()).pathname === "/api/records") reads += 1;
    });
    // Decisions landing together (parallel tool calls), each heard as it is written.
    const burst = 40;
    const records = Array.from({ length: burst }, (_, i) => gateRecord(i + 2));
    for (const record of records) await sink.append(record);
    for (const record of records) for (const heard of listeners) heard(record);
    await expect.poll(() => page.locator("#records tbody tr").count()).toBe(1 + burst);
    // One read in flight and one queued behind it: what the queued one reads is newer than every
    // decision heard meanwhile.
    expect(reads).toBeLessThanOrEqual(3);
    expect(await page.locator("#records tbody tr").first().locator("td").nth(1).textContent()).toBe(
      `tool_${1 + burst}`,
    );
    expect(await log(0)).toBe("sealed");
  });

  it("records from an observer in the agent's process carry no log check: no Log column, no note", async () => {
    const records = new RecentRecords();
    records.onGate({ turn: 0, callId: "c1", decision: gateRecord(1) });
    const { page, row, note } = await consoleOver(records, 1);
    expect(await page.locator("#records-log").isVisible()).toBe(false);
    expect(await row(0).locator("td").count()).toBe(5);
    expect(await note.isVisible()).toBe(false);
  });
});
