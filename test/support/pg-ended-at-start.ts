/**
 * One process of the "ended as it starts" Postgres test:
 *   node --import tsx test/support/pg-ended-at-start.ts <migrate|transaction|listener|promise-pool> <url> <schema>
 * Runs one of loopctl's connection checkouts through a proxy that has the
 * server end the new connection in the read that starts it (see
 * pg-ending-proxy.ts), then the same work again with the server left alone.
 * Prints one JSON line with what each attempt gave. A connection error
 * nobody listens to would end this process instead (an "Unhandled 'error'
 * event"), which the test sees in the exit code.
 */
import pg from "pg";
import { Grant, GrantScope } from "../../src/grant/index.js";
import { migrate, PostgresAskQueue, PostgresGrantStore } from "../../src/postgres/index.js";
import type { PgPool } from "../../src/postgres/index.js";
import { makeAsk } from "./ask-fixtures.js";
import { startEndingProxy } from "./pg-ending-proxy.js";

const [scenario, url, schema] = process.argv.slice(2);
if (scenario === undefined || url === undefined || schema === undefined) {
  throw new Error("usage: pg-ended-at-start.ts <migrate|transaction|listener|promise-pool> <url> <schema>");
}

const proxy = await startEndingProxy(url);
const pool = new pg.Pool({ connectionString: proxy.url, max: 2 });
pool.on("error", () => undefined);
const direct = new pg.Pool({ connectionString: url, max: 4 });
direct.on("error", () => undefined);

/** An attempt's outcome: "ok", or the error's class and text. */
async function attempt(work: () => Promise<unknown>): Promise<string> {
  try {
    await work();
    return "ok";
  } catch (error) {
    return error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  }
}

const result: Record<string, unknown> = { scenario };
if (scenario === "transaction" || scenario === "listener") await migrate(direct, { schema });
if (scenario === "migrate") {
  proxy.endNext(1);
  result["first"] = await attempt(() => migrate(pool, { schema }));
  result["second"] = await attempt(() => migrate(pool, { schema }));
} else if (scenario === "transaction") {
  const store = new PostgresGrantStore(pool, { project: "p", schema });
  // The schema check and a load first, on a connection of their own; it is then held,
  // so that the save's transaction opens a new connection.
  await store.load();
  const held = await direct.connect();
  const busy = await new Promise<pg.PoolClient>((resolve, reject) =>
    pool.connect((error, client) =>
      client === undefined ? reject(error ?? new Error("no connection")) : resolve(client),
    ),
  );
  proxy.endNext(1);
  const grant = new Grant("write", "allow", GrantScope.thisTool());
  result["first"] = await attempt(() => store.save(grant));
  busy.release();
  held.release();
  result["second"] = await attempt(() => store.save(grant));
  result["grants"] = (await store.load()).map((g) => g.id).join(",") === grant.id ? "saved once" : "wrong";
} else if (scenario === "listener") {
  const errors: string[] = [];
  const consoleQueue = new PostgresAskQueue(pool, {
    schema,
    onError: (error) => errors.push(error instanceof Error ? error.message : String(error)),
  });
  const worker = new PostgresAskQueue(direct, { schema });
  proxy.endNext(1);
  // The inbox's listener is the first connection the console's pool opens: the one ended.
  const inbox = consoleQueue.approver();
  const ask = makeAsk(1);
  const parked = worker.resolver.resolve(ask, { signal: new AbortController().signal });
  const next = await inbox.next();
  result["first"] = next?.id === ask.id ? "ok" : `got ${String(next?.id)}`;
  result["second"] = (await inbox.resolve(ask.id, { type: "approve" })) ? "ok" : "not landed";
  result["parked"] = (await parked).type;
  result["heard"] = errors;
  await Promise.all([consoleQueue.close(), worker.close()]);
} else if (scenario === "promise-pool") {
  // A pool whose connect() ignores a callback and returns a promise (a wrapper around pg.Pool, say).
  const wrapped = {
    query: pool.query.bind(pool),
    connect: () => pool.connect(),
  } as unknown as PgPool;
  result["first"] = await attempt(() => migrate(wrapped, { schema }));
  const store = new PostgresGrantStore(wrapped, { project: "p", schema });
  result["second"] = await attempt(() => store.save(new Grant("read", "allow", GrantScope.thisTool())));
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
result["ended"] = proxy.ended;
await Promise.all([pool.end(), direct.end()]);
await proxy.close();
process.stdout.write(`${JSON.stringify(result)}\n`);
