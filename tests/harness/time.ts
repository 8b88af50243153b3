// Waiting in tests. `sleep` is for pacing (a client's think time, a window a
// behaviour must hold for, a kill at a random instant), never for ordering
// events: to wait for something, wait on the event, or poll its condition
// with a bound (`waitFor`).

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Polls `fn` every `intervalMs` until it returns something other than
 * undefined or false, and resolves to that; throws
 * `timed out waiting for <what>` once `timeoutMs` has passed.
 */
export async function waitFor<T>(
  what: string,
  fn: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  intervalMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() >= deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(intervalMs);
  }
}
