import { Grant, GrantScope } from "../../src/grant/index.js";
import type { GrantStore } from "../../src/grant/index.js";

/**
 * The writes of one process in the multi-process grant tests: `count` grants
 * of its own (re-saving some with a note), revoking every third right after
 * saving it; `between(i)` runs after each one.
 */
export async function writeGrants(
  store: GrantStore,
  count: number,
  seed: number,
  between: (i: number) => Promise<unknown> = () => Promise.resolve(),
): Promise<{ saved: string[]; revoked: string[] }> {
  const saved: string[] = [];
  const revoked: string[] = [];
  for (let i = 0; i < count; i++) {
    const scope = i % 2 === 0 ? GrantScope.thisTool() : GrantScope.thisCall({ seed, i, path: `/w/${seed}/${i}` });
    const grant = new Grant(`w${seed}-tool-${i}`, i % 5 === 0 ? "deny" : "allow", scope).withCreatedAtMs(i);
    await store.save(grant);
    if (i % 4 === 1) await store.save(grant.withNote("re-saved"));
    if (i % 3 === 0) {
      const removed = await store.revoke(grant.id);
      if (removed?.id !== grant.id) throw new Error(`revoke of ${grant.id} found nothing`);
      revoked.push(grant.id);
    } else {
      saved.push(grant.id);
    }
    await between(i);
  }
  return { saved, revoked };
}
