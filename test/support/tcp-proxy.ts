/**
 * A TCP proxy in front of the PostgreSQL server, so a test can cut one
 * process's connections (as a network failure would) and restore them, or
 * have the network swallow everything (a black hole).
 */
import { createServer, connect } from "node:net";
import type { Server, Socket } from "node:net";

export interface TcpProxy {
  /** A connection string to the server through the proxy. */
  readonly url: string;
  /** Drops every connection and refuses new ones. */
  cut(): Promise<void>;
  /** Accepts connections again. */
  restore(): Promise<void>;
  /**
   * From now on swallows every byte, both ways, on every connection, new ones
   * included, and leaves them all open: a network that drops packets, with no
   * FIN or RST to say so.
   */
  stall(): void;
  /**
   * Swallows every byte, both ways, on the connections open now, and leaves
   * them open; connections made later pass as before (a NAT that forgot the
   * old ones).
   */
  stallOpen(): void;
  /**
   * Stalls as {@link TcpProxy.stall} does from the first bytes a client sends
   * that hold `text` (those bytes included): the statement never arrives.
   */
  stallOn(text: string): void;
  /**
   * Stalls as {@link TcpProxy.stallOpen} does the one connection whose client
   * next sends bytes holding `text` (those bytes included): that statement
   * never arrives, nor does anything after it on that connection. Every other
   * connection, later ones sending `text` included, passes as before (a
   * network that lost one connection, then recovered).
   */
  stallConnectionOn(text: string): void;
  /** How many connections {@link TcpProxy.stallConnectionOn} and {@link TcpProxy.stallOpen} have stalled. */
  readonly stalledConnections: number;
  /**
   * Holds back, from the bytes that hold `text` on, what the one connection
   * whose client next sends `text` sends, until {@link TcpProxy.deliver}: a
   * statement delayed in the network. The server's side of that connection
   * stays open when its client gives up, so what was held still arrives.
   */
  holdConnectionOn(text: string): void;
  /**
   * Sends the server what {@link TcpProxy.holdConnectionOn} held, then closes
   * that connection's server side if its client is gone (the server runs
   * what it received first). Resolves once the server's side is closed.
   */
  deliver(): Promise<void>;
  /**
   * Holds back what the server sends on the one connection whose client next
   * sends bytes holding `text` (those bytes reach the server), from then
   * until {@link TcpProxy.pass}: replies delayed in the network.
   */
  holdRepliesOn(text: string): void;
  /** Whether a connection is held now, by {@link TcpProxy.holdConnectionOn} or {@link TcpProxy.holdRepliesOn}. */
  readonly holding: boolean;
  /**
   * The local port of the client whose replies {@link TcpProxy.holdRepliesOn} holds now (a pg
   * client's `connection.stream.localPort`), so a test can tell when that client has its reply.
   */
  readonly heldRepliesPort: number | undefined;
  /** Sends on what is held, either way, and lets that connection pass as before. */
  pass(): void;
  /** What clients sent since {@link TcpProxy.stall}, as latin1 text: it never reached the server. */
  readonly swallowed: string;
  close(): Promise<void>;
}

export async function startProxy(databaseUrl: string): Promise<TcpProxy> {
  const target = new URL(databaseUrl);
  const sockets = new Set<Socket>();
  let stalled = false;
  let trigger: string | undefined;
  let connectionTrigger: string | undefined;
  const swallowed: Buffer[] = [];
  const stalledSockets = new WeakSet<Socket>();
  let stalledCount = 0;
  const stallSocket = (socket: Socket): void => {
    if (stalledSockets.has(socket)) return;
    stalledSockets.add(socket);
    stalledCount += 1;
  };
  let holdTrigger: string | undefined;
  let held: { readonly chunks: Buffer[]; readonly upstream: Socket; clientGone: boolean } | undefined;
  let repliesTrigger: string | undefined;
  let repliesHeld: { readonly chunks: Buffer[]; readonly upstream: Socket; readonly client: Socket } | undefined;
  const makeServer = (): Server =>
    createServer((client) => {
      const upstream = connect(Number(target.port || 5432), target.hostname);
      for (const socket of [client, upstream]) {
        sockets.add(socket);
        socket.on("error", () => undefined);
        socket.on("close", () => sockets.delete(socket));
      }
      const swallowing = (): boolean => stalled || stalledSockets.has(client);
      const holding = (): boolean => held !== undefined && held.upstream === upstream;
      client.on("data", (data: Buffer) => {
        if (holdTrigger !== undefined && data.includes(holdTrigger, 0, "latin1")) {
          holdTrigger = undefined;
          held = { chunks: [], upstream, clientGone: false };
        }
        if (repliesTrigger !== undefined && data.includes(repliesTrigger, 0, "latin1")) {
          repliesTrigger = undefined;
          repliesHeld = { chunks: [], upstream, client };
        }
        if (holding()) {
          held?.chunks.push(data);
          return;
        }
        if (trigger !== undefined && data.includes(trigger, 0, "latin1")) stalled = true;
        if (connectionTrigger !== undefined && data.includes(connectionTrigger, 0, "latin1")) {
          connectionTrigger = undefined;
          stallSocket(client);
        }
        if (swallowing()) swallowed.push(data);
        else upstream.write(data);
      });
      upstream.on("data", (data: Buffer) => {
        if (repliesHeld !== undefined && repliesHeld.upstream === upstream) repliesHeld.chunks.push(data);
        else if (!swallowing()) client.write(data);
      });
      // A stalled network carries no FIN either.
      client.on("end", () => swallowing() || holding() || upstream.end());
      upstream.on("end", () => swallowing() || client.end());
      client.on("close", () => {
        if (held !== undefined && held.upstream === upstream) held.clientGone = true;
        else upstream.destroy();
      });
      upstream.on("close", () => client.destroy());
    });
  let server = makeServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as { port: number }).port;
  const url = new URL(databaseUrl);
  url.hostname = "127.0.0.1";
  url.port = String(port);
  const stop = async (): Promise<void> => {
    for (const socket of sockets) socket.destroy();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  };
  return {
    url: url.toString(),
    cut: stop,
    restore: async () => {
      server = makeServer();
      await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
    },
    stall: () => {
      stalled = true;
    },
    stallOn: (text) => {
      trigger = text;
    },
    stallConnectionOn: (text) => {
      connectionTrigger = text;
    },
    holdConnectionOn: (text) => {
      holdTrigger = text;
    },
    deliver: async () => {
      const what = held;
      if (what === undefined) throw new Error("nothing is held");
      held = undefined;
      const closed = new Promise<void>((resolve) => {
        if (what.upstream.destroyed) resolve();
        else what.upstream.once("close", () => resolve());
      });
      for (const chunk of what.chunks) what.upstream.write(chunk);
      if (what.clientGone) what.upstream.end();
      await closed;
    },
    holdRepliesOn: (text) => {
      repliesTrigger = text;
    },
    get holding() {
      return held !== undefined || repliesHeld !== undefined;
    },
    get heldRepliesPort() {
      return repliesHeld?.client.remotePort;
    },
    pass: () => {
      if (held !== undefined) {
        for (const chunk of held.chunks) held.upstream.write(chunk);
        if (held.clientGone) held.upstream.end();
        held = undefined;
      }
      if (repliesHeld !== undefined) {
        for (const chunk of repliesHeld.chunks) repliesHeld.client.write(chunk);
        repliesHeld = undefined;
      }
    },
    stallOpen: () => {
      for (const socket of sockets) stallSocket(socket);
    },
    get stalledConnections() {
      return stalledCount;
    },
    get swallowed() {
      return Buffer.concat(swallowed).toString("latin1");
    },
    close: () => (server.listening ? stop() : Promise.resolve()),
  };
}
