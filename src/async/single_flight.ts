// One run per key at a time: a call while the key's run is in flight joins it
// instead of starting a second.

export interface SingleFlight<T> {
  /** `fn`'s promise, or the one already in flight for `key` (started by an earlier call). */
  run(key: string, fn: () => Promise<T>): Promise<T>;
}

export function createSingleFlight<T>(): SingleFlight<T> {
  const inFlight = new Map<string, Promise<T>>();
  return {
    run(key, fn) {
      let pending = inFlight.get(key);
      if (pending === undefined) {
        pending = fn();
        inFlight.set(key, pending);
        pending.then(() => inFlight.delete(key), () => inFlight.delete(key));
      }
      return pending;
    },
  };
}
