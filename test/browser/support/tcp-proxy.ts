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
  /**
   * Stops moving bytes either way without closing anything, as a network that drops packets
   * does: open connections go silent, new ones are taken and go nowhere, until {@link TcpProxy.resume}.
   */
  stall(): void;
  /** Moves bytes again, on every connection, those held up by the stall first. */
  resume(): void;
  close(): Promise<void>;
}

export async function startTcpProxy(): Promise<TcpProxy> {
  const sockets = new Set<Socket>();
  let target: number | undefined;
  let refusing = false;
  let stalled = false;
  const pairs = new Set<[Socket, Socket]>();
  const flow = ([client, upstream]: [Socket, Socket]) => {
    client.pipe(upstream);
    upstream.pipe(client);
  };
  const server = createServer((client) => {
    if (refusing || target === undefined) {
      client.destroy();
      return;
    }
    const upstream = connect(target, "127.0.0.1");
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    for (const socket of pair) {
      sockets.add(socket);
      socket.on("close", () => {
        sockets.delete(socket);
        pairs.delete(pair);
      });
      socket.on("error", () => {
        client.destroy();
        upstream.destroy();
      });
    }
    // One end closed closes the other.
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());
    if (!stalled) flow(pair);
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
    stall() {
      stalled = true;
      for (const [client, upstream] of pairs) {
        client.unpipe(upstream);
        upstream.unpipe(client);
        client.pause();
        upstream.pause();
      }
    },
    resume() {
      stalled = false;
      for (const pair of pairs) flow(pair);
    },
    close() {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
