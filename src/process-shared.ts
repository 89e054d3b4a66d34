/**
 * One value per process, shared by every copy of loopctl the process loads
 * (its ESM and CommonJS builds, a bundle, another version): made by the first
 * copy that asks for `key`, kept on `globalThis` under `Symbol.for(key)`, and
 * defined read-only, so that no copy replaces the value the others use.
 */
export function processShared<T>(key: string, make: () => T): T {
  const symbol = Symbol.for(key);
  if (Object.hasOwn(globalThis, symbol)) return (globalThis as unknown as Record<symbol, T>)[symbol] as T;
  const value = make();
  Object.defineProperty(globalThis, symbol, { value });
  return value;
}
