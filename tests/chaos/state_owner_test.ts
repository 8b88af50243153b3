// One writer per state file: a second provider on the same --state refuses to
// start, naming the holder, and the lock dies with its owner (SIGKILL
// included), so a restart right after a crash starts at once.

import assert from "node:assert/strict";
import {
  fakeProviderArgs,
  freePort,
  Harness,
  MachineState as St,
  runUntilExit,
  startProvider,
} from "../harness/mod.ts";

const opts = { sanitizeOps: false, sanitizeResources: false };

Deno.test({
  name: "[state] a second provider on the same --state refuses, naming pid, host and since",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfstate-owner-" });
    const state = `${dir}/state.kv`;
    const before = Date.now();
    const owner = await startProvider({ args: fakeProviderArgs({ seed: 8, state }) });
    const h = new Harness(owner.addr);
    try {
      const port = freePort();
      const r = await runUntilExit(
        [`--addr=127.0.0.1:${port}`, ...fakeProviderArgs({ seed: 8, state })],
        { watchPort: port, timeoutMs: 20_000 },
      );
      assert.equal(r.code, 1, `exit code ${r.code}; stderr:\n${r.stderr}`);
      assert.equal(r.served, false, "the second provider served before refusing");
      // Log records are JSON objects, one per line; the refusal is the plain line.
      const lines = r.stderr.split("\n").filter((l) => l.trim() !== "" && !l.startsWith("{"));
      assert.equal(lines.length, 1, lines.join("\n"));
      const m = lines[0].match(
        /^error: --state ".*": in use by another provider: pid (\d+) on host (\S+) since (\S+) \(lock file .*\.lock\)$/,
      );
      assert.ok(m, `refusal line: ${lines[0]}`);
      assert.equal(Number(m[1]), owner.pid, "the pid named is the owner's");
      assert.equal(m[2], Deno.hostname());
      const since = Date.parse(m[3]);
      assert.ok(since >= before - 1000 && since <= Date.now(), `since ${m[3]}`);

      // The refused start changed nothing: the owner still serves its fleet.
      await h.walkToIdle();
      assert.equal((await h.list()).machines.length, 8);
    } finally {
      h.close();
      await owner.stop();
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name: "[state] after a SIGKILL of the owner a new provider starts at once on the same state",
  ...opts,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "bfstate-owner-" });
    const state = `${dir}/state.kv`;
    try {
      const first = await startProvider({ args: fakeProviderArgs({ seed: 8, state }) });
      const h1 = new Harness(first.addr);
      const { id } = await h1.walkToIdle();
      h1.close();
      await first.stop(); // SIGKILL: no chance to unlock

      // Straight away: no wait for a lease to expire, no refusal.
      const second = await startProvider({ args: fakeProviderArgs({ seed: 8, state }) });
      const h2 = new Harness(second.addr);
      try {
        assert.equal((await h2.get(id)).state, St.IDLE, "the new owner serves the same state");
        console.log(
          `spawn to serving: first owner ${Math.round(first.readyMs)} ms, ` +
            `after its SIGKILL ${Math.round(second.readyMs)} ms`,
        );
      } finally {
        h2.close();
        await second.stop();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
