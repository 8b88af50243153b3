// Waiting in tests. `sleep` is for pacing (a client's think time, a window a
// behaviour must hold for, a kill at a random instant), never for ordering
// events: to wait for something, wait on the event, or poll its condition
// with a bound (`waitFor`), the one polling helper of the suites.

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** What `waitFor` throws when its bound passes; its message says what was awaited. */
export class WaitTimeout extends Error {
  override name = "WaitTimeout";
}

/**
 * Polls `fn` every `intervalMs` until it returns something other than
 * undefined or false, and resolves to that; throws a WaitTimeout
 * `timed out after <ms> ms waiting for <what>` once `timeoutMs` has passed.
 * `what` may be a function, asked at the timeout, to say what was last seen.
 * An error `fn` throws ends the wait at once (a condition that can no longer
 * hold: the process exited, the machine went FAILED).
 */
export async function waitFor<T>(
  what: string | (() => string),
  fn: () => T | undefined | false | Promise<T | undefined | false>,
  timeoutMs = 10_000,
  intervalMs = 20,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v !== undefined && v !== false) return v;
    if (Date.now() >= deadline) {
      const said = typeof what === "string" ? what : what();
      throw new WaitTimeout(`timed out after ${timeoutMs} ms waiting for ${said}`);
    }
    await sleep(intervalMs);
  }
}
