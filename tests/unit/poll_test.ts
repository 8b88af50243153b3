// pollUntil / pollWithin: the one read-sleep loop the Proxmox backend polls
// and retries with. Ordering is proven by aborts and call counts, never by
// measuring time.

import assert from "node:assert/strict";
import { pollUntil, pollWaits, pollWithin } from "../../src/async/poll.ts";

function take(n: number, it: Iterator<number>): number[] {
  return Array.from({ length: n }, () => it.next().value);
}

Deno.test("poll waits: fixed, growing ×1.5 by default, any factor, capped", () => {
  assert.deepEqual(take(3, pollWaits(25)), [25, 25, 25]);
  assert.deepEqual(take(6, pollWaits({ initialMs: 10, maxMs: 40 })), [10, 15, 23, 35, 40, 40]);
  assert.deepEqual(take(4, pollWaits({ initialMs: 250, maxMs: 1000, factor: 2 })), [
    250,
    500,
    1000,
    1000,
  ]);
});

Deno.test("pollUntil: calls until an answer, numbering the calls; null is an answer", async () => {
  const seen: number[] = [];
  const got = await pollUntil(AbortSignal.timeout(5000), 1, (call) => {
    seen.push(call);
    return Promise.resolve(call === 2 ? "done" : undefined);
  });
  assert.equal(got, "done");
  assert.deepEqual(seen, [0, 1, 2]);
  assert.equal(
    await pollUntil(AbortSignal.timeout(5000), 1, () => Promise.resolve(null)),
    null,
  );
});

Deno.test("pollUntil: an error thrown by a call ends the poll", async () => {
  let calls = 0;
  await assert.rejects(
    pollUntil(AbortSignal.timeout(5000), 1, () => {
      calls++;
      return Promise.reject(new Error("final"));
    }),
    /final/,
  );
  assert.equal(calls, 1);
});

Deno.test("pollUntil: an abort during the wait rejects with its reason; waitFirst calls nothing first", async () => {
  for (const waitFirst of [false, true]) {
    const ac = new AbortController();
    let calls = 0;
    const polling = pollUntil(ac.signal, 60_000, () => {
      calls++;
      return Promise.resolve(undefined);
    }, { waitFirst });
    await new Promise((r) => setTimeout(r, 0));
    ac.abort(new Error("stopped"));
    await assert.rejects(polling, /stopped/);
    assert.equal(calls, waitFirst ? 0 : 1);
  }
});

Deno.test("pollWithin: undefined once the limit has passed, an answer before it", async () => {
  let calls = 0;
  const none = await pollWithin(AbortSignal.timeout(5000), 60_000, 0, () => {
    calls++;
    return Promise.resolve(undefined);
  });
  assert.equal(none, undefined);
  assert.equal(calls, 1, "no sleep and no call after the limit");
  assert.equal(
    await pollWithin(
      AbortSignal.timeout(5000),
      1,
      60_000,
      (call) => Promise.resolve(call === 1 ? 7 : undefined),
    ),
    7,
  );
});
