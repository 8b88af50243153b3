// The write queue between the kit and the disk. Its rules:
//
// - Changes handed over in one synchronous step (one event-loop task) are one
//   batch, committed after the task ends; a newer change to a key replaces the
//   queued one.
// - Batches commit one at a time, in order. `handedCount` counts changes
//   handed over, `committedCount` how many of them are committed; `durable()` resolves
//   once everything handed over before the call is committed, and rejects if
//   the commit holding it failed.
// - A failed commit puts its batch back under anything queued since (newer
//   changes win), sets `failure` and retries every RETRY_MS until a commit
//   succeeds; the failure is logged once, and the recovery once. While
//   closing, a failed commit is not retried.

import { getLogger } from "@logtape/logtape";
import { message } from "./kv_commit.ts";

const RETRY_MS = 500;
const log = getLogger(["bigfleet", "state"]);

export interface WriteQueue<T> {
  put(key: string, item: T): void;
  /** The queued change to `key`, if any. */
  queued(key: string): T | undefined;
  readonly handedCount: number;
  readonly committedCount: number;
  /** Why commits fail (null when the last one succeeded). */
  readonly failure: unknown;
  /** Changes still queued. */
  readonly size: number;
  durable(): Promise<void>;
  /** Stops retrying and waits until the commit under way (if any) ends. */
  drain(): Promise<void>;
}

export interface QueueHooks<T> {
  /** Commits one batch, all or nothing. */
  commit(batch: Map<string, T>): Promise<void>;
  /** After each successful commit, before the next batch. */
  afterCommit(): Promise<void>;
  /** `old` will never be committed: `newer` replaced it (cleanup of what an attempt wrote). */
  replaced(old: T, newer: T): void;
}

interface Waiter {
  /** Resolved once `committedCount` reaches this. */
  upTo: number;
  resolve: () => void;
  reject: (e: unknown) => void;
}

export function createWriteQueue<T>(hooks: QueueHooks<T>): WriteQueue<T> {
  let pending = new Map<string, T>();
  let handed = 0;
  let committed = 0;
  let failure: unknown = null;
  let failingSince = 0;
  let closing = false;
  let flushing: Promise<void> | null = null;
  let waiters: Waiter[] = [];

  async function flushLoop(): Promise<void> {
    // Let the current task finish so its changes land in one commit.
    await Promise.resolve();
    while (pending.size > 0) {
      const batch = pending;
      const upTo = handed;
      pending = new Map();
      try {
        await hooks.commit(batch);
      } catch (e) {
        if (failure === null) {
          failingSince = Date.now();
          log.error(
            "state store commit failed; lifecycle calls answer UNAVAILABLE and the changes are retried every {retryMs} ms until a commit succeeds: {error}",
            { error: message(e), retryMs: RETRY_MS },
          );
        } else {
          log.debug("state store commit failed again: {error}", { error: message(e) });
        }
        failure = e;
        requeue(batch);
        wake(upTo, e);
        if (closing) break;
        await new Promise((r) => setTimeout(r, RETRY_MS));
        continue;
      }
      committed = upTo;
      if (failure !== null) {
        log.info("state store recovered after {ms} ms: queued changes are committed", {
          ms: Date.now() - failingSince,
        });
        failure = null;
      }
      wake();
      await hooks.afterCommit();
    }
    flushing = null;
  }

  function requeue(batch: Map<string, T>): void {
    for (const [k, v] of batch) {
      const newer = pending.get(k);
      if (newer === undefined) pending.set(k, v);
      else hooks.replaced(v, newer);
    }
  }

  /** Resolves the waiters now committed; with `failedUpTo`, rejects those the failed batch held. */
  function wake(failedUpTo?: number, error?: unknown): void {
    const keep: Waiter[] = [];
    for (const w of waiters) {
      if (w.upTo <= committed) w.resolve();
      else if (failedUpTo !== undefined && w.upTo <= failedUpTo) w.reject(error);
      else keep.push(w);
    }
    waiters = keep;
  }

  return {
    put(key, item) {
      const old = pending.get(key);
      if (old !== undefined) hooks.replaced(old, item);
      pending.set(key, item);
      handed++;
      flushing ??= flushLoop();
    },
    queued: (key) => pending.get(key),
    get handedCount() {
      return handed;
    },
    get committedCount() {
      return committed;
    },
    get failure() {
      return failure;
    },
    get size() {
      return pending.size;
    },
    durable() {
      if (committed >= handed) return Promise.resolve();
      if (failure !== null && !flushing) return Promise.reject(failure);
      return new Promise((resolve, reject) => waiters.push({ upTo: handed, resolve, reject }));
    },
    async drain() {
      closing = true;
      while (flushing) await flushing;
    },
  };
}
