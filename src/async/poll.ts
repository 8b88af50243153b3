// Polling: call until an answer comes, with fixed or growing waits between calls.

import { sleep } from "./sleep.ts";

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
