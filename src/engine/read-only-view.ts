const refuse = (): boolean => false;

/**
 * Refuses every write: in strict code (and in every built-in array method,
 * which writes strictly) a write throws a `TypeError`, as on a frozen array.
 */
const READ_ONLY: ProxyHandler<unknown[]> = {
  set: refuse,
  defineProperty: refuse,
  deleteProperty: refuse,
  setPrototypeOf: refuse,
  preventExtensions: refuse,
};

/**
 * A live, read-only view of `items`: it shows every item the owner adds
 * later, and nobody holding it can add, remove, replace or reorder one.
 * Made once, in constant time: a view handed out every turn costs the same
 * however long `items` has grown, where a frozen copy would not.
 */
export function readOnlyView<T>(items: T[]): readonly T[] {
  return new Proxy<T[]>(items, READ_ONLY);
}
