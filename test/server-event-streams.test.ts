import { createServer } from "node:http";
import type { ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, expect, it } from "vitest";
import { EventStreams } from "../src/server/event-streams.js";
import { openStream } from "./support/http-client.js";

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
});

// What the server hands EventStreams is not reachable through its API once close() ran: a record
// source or an approver event arriving then is sent on a closed EventStreams, tested here directly.
it("send() after close() writes nothing: no write after end, no error on the response", async () => {
  const streams = new EventStreams(4, 60_000, 30_000);
  const opened: ServerResponse[] = [];
  const server = createServer((req, res) => {
    opened.push(res);
    streams.open(req, res, []);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  cleanups.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
  const { port } = server.address() as AddressInfo;
  const stream = await openStream(`http://127.0.0.1:${port}/`, {});
  cleanups.push(() => stream.close());
  const res = opened[0];
  if (res === undefined) throw new Error("no stream opened");
  const errors: unknown[] = [];
  res.on("error", (error) => errors.push(error));

  streams.close();
  streams.send("settled", { id: "late" });
  await new Promise((resolve) => setTimeout(resolve, 50));
  expect(errors).toEqual([]);
  expect(streams.size).toBe(0);
});
