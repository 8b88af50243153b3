// Critical sections run one at a time, in arrival order.

/** A FIFO mutex: `run` executes critical sections one at a time. */
export function createMutex(): { run<T>(fn: () => Promise<T>): Promise<T> } {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    run<T>(fn: () => Promise<T>): Promise<T> {
      const next = tail.then(fn, fn);
      // The caller gets the section's error through `next`; the tail only orders the next one.
      tail = next.catch(() => {});
      return next;
    },
  };
}
