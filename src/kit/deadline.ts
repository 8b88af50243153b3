// Time for background work. A transition runs under its deadline: the work
// gets an AbortSignal that fires at the deadline, and the race makes the
// deadline hold even for work that ignores the signal, whose late result is
// then dropped. Backends wait with an abortable sleep so that signal stops them.

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

/** Sleep that ends early (rejecting with the abort reason) when `signal` aborts. */
export function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal.addEventListener("abort", onAbort, { once: true });
  });
}

/** A wait that grows: `initialMs` first, then × `factor` (1.5 unless given) each time, at most `maxMs`. */
export interface Backoff {
  initialMs: number;
  maxMs: number;
  factor?: number;
}

/** How long a poll waits between calls: a fixed number of milliseconds, or a Backoff. */
export type PollInterval = number | Backoff;

/** The waits of a poll, in order, without end. */
export function* pollWaits(interval: PollInterval): Generator<number, never> {
  if (typeof interval === "number") {
    for (;;) yield interval;
  }
  for (let ms = interval.initialMs;;) {
    yield ms;
    ms = Math.min(interval.maxMs, Math.round(ms * (interval.factor ?? 1.5)));
  }
}

/**
 * Call `fn` until it answers (returns anything but undefined), sleeping
 * `interval` between calls; `fn` gets the call's 0-based number and ends the
 * poll early by throwing. Rejects with the abort reason once `signal` aborts.
 * `waitFirst`: sleep before the first call too (the work was only just started).
 */
export async function pollUntil<T>(
  signal: AbortSignal,
  interval: PollInterval,
  fn: (call: number) => Promise<T | undefined>,
  opts: { waitFirst?: boolean } = {},
): Promise<T> {
  return (await poll(signal, interval, Infinity, opts.waitFirst ?? false, fn)) as T;
}

/**
 * pollUntil with a time limit: resolves undefined once `withinMs` has passed
 * without an answer. No call (and no sleep) starts after the limit.
 */
export function pollWithin<T>(
  signal: AbortSignal,
  interval: PollInterval,
  withinMs: number,
  fn: (call: number) => Promise<T | undefined>,
): Promise<T | undefined> {
  return poll(signal, interval, Date.now() + withinMs, false, fn);
}

async function poll<T>(
  signal: AbortSignal,
  interval: PollInterval,
  deadline: number,
  waitFirst: boolean,
  fn: (call: number) => Promise<T | undefined>,
): Promise<T | undefined> {
  const waits = pollWaits(interval);
  if (waitFirst) await sleep(waits.next().value, signal);
  for (let call = 0;; call++) {
    const answer = await fn(call);
    if (answer !== undefined) return answer;
    if (Date.now() >= deadline) return undefined;
    await sleep(waits.next().value, signal);
    if (Date.now() >= deadline) return undefined;
  }
}
