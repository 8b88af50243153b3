// No client's goodbye can crash the provider (docs/security.md#the-http2-frame-guard).
// Both recipes of the Deno node:http2 abort run against a real provider
// process: a plain node:http2 client that makes sequential unary calls and
// closes politely (GOAWAY, last-stream-id 0), and a grpc-js client churning
// channels over its shared connection. Without the frame guard the provider
// frees the HTTP/2 session while nghttp2 is still using it; whether that
// read of freed memory aborts the process is luck of the heap, so the
// provider runs with glibc's MALLOC_PERTURB_, which fills freed memory with
// a pattern and turns every such read into a crash on the spot. The proxy in
// between only counts the GOAWAY frames, to show the goodbyes really happened.

import assert from "node:assert/strict";
import { fakeProviderArgs, ProviderClient, startProvider, tail } from "../harness/mod.ts";
import type { ProviderProcess } from "../harness/mod.ts";
import { startGoawayProxy } from "./goaway_proxy.ts";
import type { GoawayProxy } from "./goaway_proxy.ts";
import { spawnFixture, waitFor } from "./helpers.ts";

const PERTURB = { MALLOC_PERTURB_: "165" };

async function firstMachine(proc: ProviderProcess): Promise<string> {
  const c = new ProviderClient(proc.addr);
  try {
    return (await c.list({ max_results: 1 })).machines[0].id;
  } finally {
    c.close();
  }
}

/** The provider is still up and answering after the client `run` finished. */
async function assertSurvived(
  proc: ProviderProcess,
  proxy: GoawayProxy,
  run: { code: number; stderr: string },
): Promise<void> {
  // Every goodbye processed: the provider closed its side of each connection
  // (or died, which closes them too and fails the List below).
  await waitFor("the provider to close every connection", () => proxy.open === 0);
  const status = proc.exitStatus();
  assert.equal(
    status,
    undefined,
    `the provider died: ${JSON.stringify(status)}\n${tail(proc.stderr(), 5)}`,
  );
  assert.equal(run.code, 0, `the client failed:\n${run.stderr}`);
  const c = new ProviderClient(proc.addr);
  try {
    assert.equal((await c.list({ max_results: 1 })).machines.length, 1);
  } finally {
    c.close();
  }
}

Deno.test("goaway: node:http2 sessions of sequential calls closed politely leave the provider up", async () => {
  const proc = await startProvider({ args: fakeProviderArgs({ seed: 64 }), env: PERTURB });
  const proxy = startGoawayProxy(proc.port);
  try {
    // The measured recipe (17,000 calls, then close), then many short sessions.
    const plan = [17_000, ...Array(30).fill(20)];
    const run = await spawnFixture("h2_polite_close.ts", [
      `127.0.0.1:${proxy.port}`,
      await firstMachine(proc),
      plan.join(","),
    ]).done;
    await assertSurvived(proc, proxy, run);
    assert.equal(run.lines.length, plan.length);
    assert.equal(run.lines[0], 'session 0 calls 17000 statuses {"0":17000}');
    assert.ok(proxy.goaways >= plan.length, `${proxy.goaways} GOAWAY frames seen`);
  } finally {
    await proxy.close();
    await proc.stop();
  }
});

Deno.test("goaway: a grpc-js client churning channels leaves the provider up", async () => {
  const proc = await startProvider({ args: fakeProviderArgs({ seed: 64 }), env: PERTURB });
  const proxy = startGoawayProxy(proc.port);
  try {
    // grpc-js closes its pooled connection about every 10 s of churn.
    const run = await spawnFixture("grpc_churn.ts", [
      `127.0.0.1:${proxy.port}`,
      await firstMachine(proc),
      "25",
    ]).done;
    await assertSurvived(proc, proxy, run);
    assert.match(run.lines[0] ?? "", /^rounds \d+ calls \d+$/);
    assert.ok(proxy.goaways >= 2, `${proxy.goaways} GOAWAY frames over ${proxy.connections}`);
  } finally {
    await proxy.close();
    await proc.stop();
  }
});
