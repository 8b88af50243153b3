// Small async helpers shared by the client modules.

/** A FIFO mutex: `run` executes critical sections one at a time. */
export function createMutex(): { run<T>(fn: () => Promise<T>): Promise<T> } {
  let tail: Promise<unknown> = Promise.resolve();
  return {
    run<T>(fn: () => Promise<T>): Promise<T> {
      const next = tail.then(fn, fn);
      tail = next.catch(() => {});
      return next;
    },
  };
}

/** Map with at most `limit` calls in flight; results keep input order. */
export async function mapLimit<A, B>(
  items: readonly A[],
  limit: number,
  fn: (a: A) => Promise<B>,
): Promise<B[]> {
  const out = new Array<B>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

/** Seconds elapsed since `t0` (a performance.now() value). */
export function secondsSince(t0: number): number {
  return (performance.now() - t0) / 1000;
}
