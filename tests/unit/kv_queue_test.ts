// The state store's write queue (src/store/kv_queue.ts) over a scripted commit:
// what makes a batch, the order batches commit in, what durable() promises,
// and what a failed commit does with its changes.

import assert from "node:assert/strict";
import { createWriteQueue } from "../../src/store/kv_queue.ts";
import type { QueueHooks, WriteQueue } from "../../src/store/kv_queue.ts";
import { waitFor } from "../harness/time.ts";

interface Scripted {
  queue: WriteQueue<string>;
  /** Every batch commit was called with, as [key, value] pairs. */
  batches: [string, string][][];
  /** Queued changes another one replaced: [old, newer]. */
  replaced: [string, string][];
  /** The next commit fails with this, then is cleared. */
  failNext: string | null;
  /** Resolves the commit under way (commits wait for this). */
  release(): void;
}

function scripted(opts: { hold?: boolean } = {}): Scripted {
  let gate = Promise.withResolvers<void>();
  const s: Scripted = {
    batches: [],
    replaced: [],
    failNext: null,
    release() {
      gate.resolve();
      gate = Promise.withResolvers<void>();
    },
    queue: undefined as unknown as WriteQueue<string>,
  };
  const hooks: QueueHooks<string> = {
    async commit(batch) {
      s.batches.push([...batch]);
      if (opts.hold) await gate.promise;
      if (s.failNext !== null) {
        const why = s.failNext;
        s.failNext = null;
        throw new Error(why);
      }
    },
    afterCommit: () => Promise.resolve(),
    replaced: (old, newer) => void s.replaced.push([old, newer]),
  };
  s.queue = createWriteQueue(hooks);
  return s;
}

Deno.test("write queue: one synchronous step is one batch, the newest change per key", async () => {
  const s = scripted();
  s.queue.put("a", "a1");
  s.queue.put("b", "b1");
  s.queue.put("a", "a2");
  assert.equal(s.queue.handedCount, 3);
  await s.queue.durable();
  assert.deepEqual(s.batches, [[["a", "a2"], ["b", "b1"]]]);
  assert.deepEqual(s.replaced, [["a1", "a2"]]);
  assert.equal(s.queue.committedCount, 3);
});

Deno.test("write queue: batches commit one at a time, in order; durable() waits for its own", async () => {
  const s = scripted({ hold: true });
  s.queue.put("a", "a1");
  const first = s.queue.durable();
  await waitFor("the first commit", () => s.batches.length === 1);
  s.queue.put("a", "a2");
  const second = s.queue.durable();
  let firstDone = false;
  let secondDone = false;
  first.then(() => firstDone = true);
  second.then(() => secondDone = true);
  assert.equal(s.batches.length, 1, "the second batch waits for the first commit");
  s.release();
  await first;
  assert.equal(firstDone && !secondDone, true, "the first answer does not wait for the second");
  assert.equal(s.queue.committedCount, 1);
  await waitFor("the second commit", () => s.batches.length === 2);
  s.release();
  await second;
  assert.deepEqual(s.batches, [[["a", "a1"]], [["a", "a2"]]]);
  assert.equal(s.queue.committedCount, 2);
});

Deno.test("write queue: a failed batch is retried under newer changes and rejects only its own waiters", async () => {
  const s = scripted({ hold: true });
  s.failNext = "disk full";
  s.queue.put("a", "a1");
  s.queue.put("b", "b1");
  const failed = s.queue.durable();
  await waitFor("the first commit", () => s.batches.length === 1);
  // Handed over while the failing commit is under way.
  s.queue.put("a", "a2");
  const later = s.queue.durable();
  s.release();
  await assert.rejects(failed, /disk full/);
  assert.equal(s.queue.failure instanceof Error, true, "the failure is reported");
  assert.equal(s.queue.committedCount, 0);
  // The retry (after the queue's retry delay) holds b1 and the newer a2, never a1.
  await waitFor("the retry", () => s.batches.length === 2);
  s.release();
  await later;
  assert.equal(s.queue.failure, null, "a successful retry clears the failure");
  assert.deepEqual(s.batches.at(-1), [["a", "a2"], ["b", "b1"]]);
  assert.deepEqual(s.replaced, [["a1", "a2"]], "the failed a1 is handed back as replaced");
  assert.equal(s.queue.committedCount, 3);
});

Deno.test("write queue: while draining, a failed commit is not retried", async () => {
  const s = scripted();
  s.failNext = "read-only";
  s.queue.put("a", "a1");
  const waited = s.queue.durable();
  await s.queue.drain();
  await assert.rejects(waited, /read-only/);
  assert.equal(s.batches.length, 1, "one attempt only");
  assert.equal(s.queue.size, 1, "the change stays queued");
  await assert.rejects(s.queue.durable(), /read-only/, "durable() reports the failure at once");
});
