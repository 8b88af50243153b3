// The conformance suite against the in-memory fake backend, booted exactly as
// the certification runner boots a provider (seed 256), then once more with
// every fake transition taking 50 ms so the checks on transitional states
// (traces, CONFIGURING snapshots, burst acks) observe something real, and
// B908 once more with reconcile passes inside its window.

import assert from "node:assert/strict";
import { fakeProviderArgs, freePort, Harness, startProvider } from "../harness/mod.ts";
import { list } from "./behaviors/list.ts";
import { defineConformanceSuite } from "./suite.ts";

// This repository's provider: behaviours that allow a choice assert the one it made.
const own = { harness: { ownProvider: true } };

defineConformanceSuite(
  "fake",
  () => startProvider({ args: fakeProviderArgs({ seed: 256 }) }),
  own,
);

defineConformanceSuite(
  "fake-delay-50ms",
  () => startProvider({ args: fakeProviderArgs({ seed: 256, fakeDelay: "50ms" }) }),
  own,
);

/** Reconcile passes the provider has finished, by outcome. */
async function reconcilePasses(metricsPort: number): Promise<{ ok: number; error: number }> {
  const text = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  const count = (outcome: string) => {
    const m = text.match(
      new RegExp(`^bigfleet_proxmox_reconcile_total\\{outcome="${outcome}"\\} (\\d+)$`, "m"),
    );
    assert.ok(m, `no reconcile_total{outcome="${outcome}"} in /metrics`);
    return Number(m[1]);
  };
  return { ok: count("ok"), error: count("error") };
}

// B908 names background reconcile, but the lanes above reconcile every 2 min
// (the default), so no pass falls in its 750 ms window. Here one runs every
// 50 ms, over machines with hosts for it to compare, and the test checks that
// passes did run meanwhile.
Deno.test({
  name: "[fake-reconcile-50ms] B908 List(since=anchor) stays empty while reconcile passes run",
  sanitizeOps: false,
  sanitizeResources: false,
  async fn() {
    const metricsPort = freePort();
    const p = await startProvider({
      args: fakeProviderArgs({
        seed: 32,
        extra: ["--reconcile-interval=50ms", `--metrics-addr=127.0.0.1:${metricsPort}`],
      }),
    });
    const h = new Harness(p.addr, own.harness);
    try {
      await h.walkToIdle();
      await h.walkToConfigured("conf-b908");
      const before = await reconcilePasses(metricsPort);
      await list.find((b) => b.id === "B908")!.run(h);
      const after = await reconcilePasses(metricsPort);
      assert.ok(
        after.ok - before.ok >= 5,
        `${after.ok - before.ok} reconcile passes in the window`,
      );
      assert.equal(after.error, before.error, "no reconcile pass failed");
    } finally {
      h.close();
      await p.stop();
    }
  },
});
