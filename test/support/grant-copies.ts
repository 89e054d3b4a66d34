// Writers that share one process, for test/grant-multiprocess.test.ts:
//   node <bundle> threads <esm> <root> <project> <threads> <per>
//     starts <threads> worker threads, each loading the ESM build and saving
//     <per> grants of its own; prints {"saved": <count>} when all are done.
//   node <bundle> copies <esm> <cjs> <root> <project> <per> <rounds>
//     loads the ESM and the CommonJS build side by side; a store from each
//     saves <per> grants at once; then, <rounds> times, the ESM store saves an
//     allow, and revokes it while the CommonJS store saves three more grants.
//     Prints {"saved": [ids], "revoked": [ids]}.
//   node <bundle> terminated <esm> <root> <project> <lockTimeoutMs>
//     starts worker threads saving grants until one is terminated while it
//     holds the lock (the lock file outlives it); then the main thread, with
//     its own copy of the ESM build, saves one grant. Prints {"attempts": n,
//     "saved": id} or {"attempts": n, "error": code}.
//   node <bundle> left-behind <esm> <root> <project>
//     as terminated, but waits until the worker has written its lock record;
//     then prints "held" and lives on, saving nothing, until its stdin ends.
import { existsSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { Worker, isMainThread, workerData } from "node:worker_threads";

type GrantModule = typeof import("../../src/grant/index.js");

async function loadEsm(path: string): Promise<GrantModule> {
  return (await import(pathToFileURL(path).href)) as GrantModule;
}

async function saveMany(
  mod: GrantModule,
  root: string,
  project: string,
  who: string,
  count: number,
): Promise<string[]> {
  const store = new mod.FileGrantStore(root, project, { lockTimeoutMs: 60_000 });
  const saved: string[] = [];
  for (let i = 0; i < count; i += 1) {
    const grant = new mod.Grant("write", i % 4 === 0 ? "deny" : "allow", mod.GrantScope.thisCall({ who, i }));
    saved.push((await store.save(grant)).id);
  }
  return saved;
}

if (!isMainThread) {
  const { esm, root, project, who, count } = workerData as {
    esm: string;
    root: string;
    project: string;
    who: string;
    count: number;
  };
  await saveMany(await loadEsm(esm), root, project, who, count);
} else if (process.argv[2] === "terminated") {
  const [esm, root, project, timeout] = process.argv.slice(3) as [string, string, string, string];
  // A query string makes this a module copy of its own, apart from the workers'.
  const mod = (await import(`${pathToFileURL(esm).href}?main`)) as GrantModule;
  const store = new mod.FileGrantStore(root, project, { lockTimeoutMs: Number(timeout) });
  const script = new URL(import.meta.url);
  let attempts = 0;
  while (!existsSync(store.lockPath)) {
    if ((attempts += 1) > 200) throw new Error("no worker was terminated while holding the lock");
    const worker = new Worker(script, {
      workerData: { esm, root, project, who: `worker-${attempts}`, count: 1_000_000 },
    });
    // Busy-waits (the worker runs on its own thread) until the worker holds the lock.
    while (!existsSync(store.lockPath)) await new Promise((resolve) => setImmediate(resolve));
    await worker.terminate();
  }
  const outcome = await store.save(new mod.Grant("deploy", "deny", mod.GrantScope.thisTool())).then(
    (grant) => ({ saved: grant.id }),
    (error: unknown) => ({ error: (error as { code?: string }).code ?? String(error) }),
  );
  process.stdout.write(`${JSON.stringify({ attempts, ...outcome })}\n`);
} else if (process.argv[2] === "left-behind") {
  const [esm, root, project] = process.argv.slice(3) as [string, string, string];
  const lock = new (await loadEsm(esm)).FileGrantStore(root, project).lockPath;
  const written = (): boolean => existsSync(lock) && statSync(lock, { throwIfNoEntry: false })?.size !== 0;
  for (let attempts = 1; !written(); attempts += 1) {
    if (attempts > 200) throw new Error("no worker was terminated while holding the lock");
    const worker = new Worker(new URL(import.meta.url), {
      workerData: { esm, root, project, who: `worker-${attempts}`, count: 1_000_000 },
    });
    while (!written()) await new Promise((resolve) => setImmediate(resolve));
    await worker.terminate();
  }
  process.stdout.write("held\n");
  process.stdin.resume().on("end", () => process.exit(0));
} else {
  const [mode, ...args] = process.argv.slice(2);
  if (mode === "threads") {
    const [esm, root, project, threads, per] = args as [string, string, string, string, string];
    const script = new URL(import.meta.url);
    await Promise.all(
      Array.from(
        { length: Number(threads) },
        (_, t) =>
          new Promise<void>((resolve, reject) => {
            const worker = new Worker(script, {
              workerData: { esm, root, project, who: `thread-${t}`, count: Number(per) },
            });
            worker.on("error", reject);
            worker.on("exit", (code) =>
              code === 0 ? resolve() : reject(new Error(`thread ${t} exited with ${code}`)),
            );
          }),
      ),
    );
    process.stdout.write(`${JSON.stringify({ saved: Number(threads) * Number(per) })}\n`);
  } else if (mode === "copies") {
    const [esm, cjs, root, project, per, rounds] = args as [string, string, string, string, string, string];
    const a = await loadEsm(esm);
    const b = createRequire(import.meta.url)(cjs) as GrantModule;
    if ((a.Grant as unknown) === (b.Grant as unknown)) throw new Error("the two builds are one copy");
    const [fromA, fromB] = await Promise.all([
      saveMany(a, root, project, "esm", Number(per)),
      saveMany(b, root, project, "cjs", Number(per)),
    ]);
    const storeA = new a.FileGrantStore(root, project, { lockTimeoutMs: 60_000 });
    const storeB = new b.FileGrantStore(root, project, { lockTimeoutMs: 60_000 });
    const saved = [...fromA, ...fromB];
    const revoked: string[] = [];
    for (let r = 0; r < Number(rounds); r += 1) {
      const allow = await storeA.save(new a.Grant("deploy", "allow", a.GrantScope.thisCall({ round: r })));
      const fillers = [0, 1, 2].map((k) =>
        storeB.save(new b.Grant("read", "allow", b.GrantScope.thisCall({ round: r, k }))),
      );
      const [gone, ...kept] = await Promise.all([storeA.revoke(allow.id), ...fillers]);
      if (gone?.id !== allow.id) throw new Error(`round ${r}: the revoke found nothing`);
      revoked.push(allow.id);
      saved.push(...kept.map((g) => g.id));
    }
    process.stdout.write(`${JSON.stringify({ saved, revoked })}\n`);
  } else {
    throw new Error(`unknown mode ${String(mode)}`);
  }
}
