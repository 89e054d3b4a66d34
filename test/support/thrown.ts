/** What `run` threw, or `undefined` when it returned: for checking an error's class and fields at once. */
export function thrownBy(run: () => unknown): unknown {
  try {
    run();
  } catch (error) {
    return error;
  }
  return undefined;
}
