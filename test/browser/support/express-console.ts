import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { createApprovalHandler } from "loopctl/server";
import type { ApprovalHandler, ApprovalHandlerOptions } from "loopctl/server";

/**
 * An approval handler mounted in an Express app by `mount`, served on a free loopback port (its
 * `Host` allowed): the port, the handler, and what closes the server and the handler after the test.
 */
export async function consoleInExpress(
  options: Omit<ApprovalHandlerOptions, "allowedHosts">,
  mount: (app: express.Express, handler: ApprovalHandler) => void,
): Promise<{ port: number; handler: ApprovalHandler; closers: (() => Promise<void> | void)[] }> {
  const http = createServer();
  await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
  const port = (http.address() as AddressInfo).port;
  const handler = createApprovalHandler({ ...options, allowedHosts: [`127.0.0.1:${port}`] });
  const app = express();
  mount(app, handler);
  http.on("request", app);
  const closers = [
    () => new Promise<void>((resolve) => http.close(() => resolve())),
    () => handler.close(),
    () => http.closeAllConnections(),
  ];
  return { port, handler, closers };
}
