// Work under a deadline. A transition runs under its deadline: the work
// gets an AbortSignal that fires at the deadline, and the race makes the
// deadline hold even for work that ignores the signal, whose late result is
// then dropped. Backends wait with an abortable sleep (sleep.ts) so that signal stops them.

export class DeadlineError extends Error {
  override name = "DeadlineError";
}

/** Resolves with the work's result, or rejects with its error or a DeadlineError at `ms`. */
export function withDeadline<T>(
  ms: number,
  message: string,
  work: (signal: AbortSignal) => Promise<T>,
): Promise<T> {
  const ac = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      const err = new DeadlineError(message);
      ac.abort(err);
      reject(err);
    }, ms);
  });
  // Started on a later tick: the caller's synchronous step (the ack) always comes first.
  const started = Promise.resolve().then(() => work(ac.signal));
  // A settle after the deadline has nobody listening; keep it from surfacing as unhandled.
  started.catch(() => {});
  return Promise.race([started, deadline]).finally(() => clearTimeout(timer));
}

/** Go-style duration text for messages: 8m0s, 2s, 150ms. */
export function formatMs(ms: number): string {
  if (ms < 1000) return `${ms}ms`;
  const s = ms / 1000;
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  return `${m}m${s - m * 60}s`;
}
