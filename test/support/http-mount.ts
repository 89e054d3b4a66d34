import type { Server as HttpServer } from "node:http";
import type { Server as HttpsServer } from "node:https";
import type { AddressInfo } from "node:net";

/** Starts `server` on a free port of 127.0.0.1; `base` is its URL, ending in `/`. */
export async function listen(server: HttpServer | HttpsServer): Promise<{ port: number; base: string }> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as AddressInfo).port;
  return { port, base: `http://127.0.0.1:${port}/` };
}

/**
 * What ends `server` after a test, with the approval handler it serves: its connections cut (an
 * event stream would keep it open), the handler closed, then the server.
 */
export function stopping(server: HttpServer | HttpsServer, handler?: { close(): unknown }): () => Promise<void> {
  return async () => {
    server.closeAllConnections();
    await handler?.close();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
}
