/**
 * A TCP proxy in front of the PostgreSQL server that can have connections
 * ended by the server as they start. For each of the next `n` connections
 * (see {@link EndingProxy.endNext}), the proxy holds back what the server
 * sends; once the server says the connection is ready, the proxy has the
 * backend terminated (`pg_terminate_backend`), and when the server has sent
 * its FATAL message and closed, the client gets everything in one write:
 * the start and the end in one read, as a loaded machine or a busy network
 * delivers them. Every byte comes from the real server.
 */
import net from "node:net";
import pg from "pg";

export interface EndingProxy {
  /** A connection string for the proxy, otherwise `url`'s. */
  readonly url: string;
  /** The next `n` connections are ended by the server as they start. */
  endNext(n: number): void;
  /** How many connections were ended so far. */
  readonly ended: number;
  close(): Promise<void>;
}

const READY = 0x5a; // "Z", ReadyForQuery
const KEY_DATA = 0x4b; // "K", BackendKeyData: the backend's pid

/** The backend pid once `bytes` hold the start of a connection up to ReadyForQuery, else undefined. */
function readyBackend(bytes: Buffer): number | undefined {
  let pid: number | undefined;
  for (let at = 0; at + 5 <= bytes.length;) {
    const type = bytes[at]!;
    const length = bytes.readInt32BE(at + 1);
    if (at + 1 + length > bytes.length) return undefined;
    if (type === KEY_DATA) pid = bytes.readInt32BE(at + 5);
    if (type === READY) return pid;
    at += 1 + length;
  }
  return undefined;
}

export async function startEndingProxy(url: string): Promise<EndingProxy> {
  const target = new URL(url);
  const admin = new pg.Pool({ connectionString: url, max: 1 });
  admin.on("error", () => undefined);
  let doomed = 0;
  let ended = 0;
  const sockets = new Set<net.Socket>();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port || 5432), target.hostname);
    sockets.add(client).add(upstream);
    const ending = doomed > 0;
    if (ending) doomed--;
    const held: Buffer[] = [];
    let terminating = false;
    client.on("data", (data) => upstream.write(data));
    upstream.on("data", (data) => {
      if (!ending) {
        client.write(data);
        return;
      }
      held.push(data);
      const pid = terminating ? undefined : readyBackend(Buffer.concat(held));
      if (pid === undefined) return;
      terminating = true;
      admin.query("SELECT pg_terminate_backend($1)", [pid]).then(
        () => ended++,
        () => client.destroy(),
      );
    });
    upstream.on("end", () => {
      if (held.length > 0) client.write(Buffer.concat(held.splice(0)));
      client.end();
    });
    client.on("end", () => upstream.end());
    for (const socket of [client, upstream]) {
      socket.on("error", () => (socket === client ? upstream : client).destroy());
      socket.on("close", () => sockets.delete(socket));
    }
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as net.AddressInfo;
  const proxied = new URL(url);
  proxied.hostname = "127.0.0.1";
  proxied.port = String(port);
  return {
    url: proxied.href,
    endNext(n) {
      doomed = n;
    },
    get ended() {
      return ended;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await admin.end();
    },
  };
}
