import { connect, createServer } from "node:net";
import type { Socket } from "node:net";

/** A TCP proxy on 127.0.0.1 whose connections a test can cut, to see how a page copes with a dropped server. */
export interface TcpProxy {
  /** The port the proxy listens on. */
  readonly port: number;
  /** Where to forward new connections from now on. */
  forwardTo(port: number): void;
  /** Destroys every open connection, both ends, and refuses new ones until {@link TcpProxy.restore}. */
  cut(): void;
  /** Takes connections again. */
  restore(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let target: number | undefined;
  let refusing = false;
  const server = createServer((client) => {
    if (refusing || target === undefined) {
      client.destroy();
      return;
    }
    const upstream = connect(target, "127.0.0.1");
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      socket.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("the proxy has no port");
  return {
    port: address.port,
    forwardTo(port) {
      target = port;
    },
    cut() {
      refusing = true;
      for (const socket of sockets) socket.destroy();
    },
    restore() {
      refusing = false;
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
