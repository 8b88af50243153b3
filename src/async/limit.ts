// Bounds on work in flight: a map with at most N calls at once, and at most N holders per key.

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

/** At most `limit` holders per key at once; the rest wait in arrival order. */
export interface KeyedLimit {
  /** Run `fn` holding one of `key`'s places; waiting ends early when `signal` aborts. */
  run<T>(key: string, fn: () => Promise<T>, signal: AbortSignal): Promise<T>;
}

/** A KeyedLimit; `limit` 0 means no limit. */
export function createKeyedLimit(limit: number): KeyedLimit {
  const held = new Map<string, number>();
  const waiting = new Map<string, (() => void)[]>();
  const release = (key: string) => {
    const next = waiting.get(key)?.shift();
    if (next) return next(); // the place passes straight to the next in line
    const n = (held.get(key) ?? 1) - 1;
    if (n > 0) held.set(key, n);
    else held.delete(key);
  };
  const acquire = (key: string, signal: AbortSignal) =>
    new Promise<void>((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      if ((held.get(key) ?? 0) < limit) {
        held.set(key, (held.get(key) ?? 0) + 1);
        return resolve();
      }
      const line = waiting.get(key) ?? [];
      waiting.set(key, line);
      const onAbort = () => {
        const i = line.indexOf(go);
        if (i >= 0) line.splice(i, 1);
        reject(signal.reason);
      };
      const go = () => {
        signal.removeEventListener("abort", onAbort);
        resolve();
      };
      line.push(go);
      signal.addEventListener("abort", onAbort, { once: true });
    });
  return {
    async run(key, fn, signal) {
      if (limit <= 0) return await fn();
      await acquire(key, signal);
      try {
        return await fn();
      } finally {
        release(key);
      }
    },
  };
}
