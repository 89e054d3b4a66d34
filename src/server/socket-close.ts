import type { Duplex } from "node:stream";

/** What waits on each socket's close: one listener a socket, however many of its requests are pipelined. */
const closeWatchers = new WeakMap<Duplex, Set<() => void>>();

/** Calls `callback` when `socket` closes; returns the function that stops it. */
export function onClose(socket: Duplex, callback: () => void): () => void {
  let watchers = closeWatchers.get(socket);
  if (watchers === undefined) {
    const all = new Set<() => void>();
    watchers = all;
    closeWatchers.set(socket, all);
    socket.once("close", () => {
      closeWatchers.delete(socket);
      for (const watcher of [...all]) watcher();
    });
  }
  const mine = watchers;
  mine.add(callback);
  return () => void mine.delete(callback);
}
