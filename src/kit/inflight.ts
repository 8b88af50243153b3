// Background work still running (transitions and recoveries), by machine id:
// what a graceful stop waits for and what `running` counts. Its one owner of
// that bookkeeping: work is counted from track() until it settles.

export interface Inflight {
  readonly size: number;
  /**
   * Counts `work` for machine `id` until it settles; returns a promise that
   * settles as `work` does, once it is no longer counted.
   */
  track<T>(id: string, work: Promise<T>): Promise<T>;
  /** Resolves once nothing runs, or when `signal` aborts; with the ids of what still runs. */
  settled(signal: AbortSignal): Promise<string[]>;
}

export function createInflight(): Inflight {
  const running = new Map<object, string>();
  /** Resolved when the count falls to zero; made by the first settled() that waits. */
  let drained: PromiseWithResolvers<void> | null = null;

  return {
    get size() {
      return running.size;
    },
    track(id, work) {
      const key = {};
      running.set(key, id);
      return work.finally(() => {
        running.delete(key);
        if (running.size === 0) {
          drained?.resolve();
          drained = null;
        }
      });
    },
    async settled(signal) {
      if (running.size > 0 && !signal.aborted) {
        drained ??= Promise.withResolvers();
        const aborted = Promise.withResolvers<void>();
        const onAbort = () => aborted.resolve();
        signal.addEventListener("abort", onAbort, { once: true });
        try {
          await Promise.race([drained.promise, aborted.promise]);
        } finally {
          signal.removeEventListener("abort", onAbort);
        }
      }
      return [...running.values()];
    },
  };
}
